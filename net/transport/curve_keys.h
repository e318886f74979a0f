#pragma once

// A CurveZMQ identity: the volunteer's (and the coordinator's) key pair, Z85
// text of 40 characters each. The public key is the identity the server sees;
// the secret key never leaves the data folder. Thread-safe functions.
//
// Key file (mode 0600, written atomically):
//   crowdtrain-curve-keypair 1
//   public <40 Z85 characters>
//   secret <40 Z85 characters>

#include "core/result.h"

#include <filesystem>
#include <string>

namespace crowdtrain::net {

struct CurveKeyPair {
    std::string publicKey; // Z85, 40 characters
    std::string secretKey; // Z85, 40 characters
    bool operator==(const CurveKeyPair&) const = default;
};

// A fresh key pair (zmq_curve_keypair). Errors: "unsupported" when libzmq
// was built without CURVE.
Result<CurveKeyPair> generateKeyPair();

// Loads the key file, or creates it with a fresh pair when it does not exist.
// Errors: "malformed_key_file" (names the file and the line; the file is left
// alone), "io_error".
Result<CurveKeyPair> loadOrCreateKeyPair(const std::filesystem::path& file);

// Parses the file's text; checks that the public key belongs to the secret key.
Result<CurveKeyPair> parseKeyPairFile(std::string_view text, const std::string& fileName);
std::string formatKeyPairFile(const CurveKeyPair& keys);

} // namespace crowdtrain::net
