#include "net/transport/curve_keys.h"

#include "core/file_io.h"
#include "net/wire/error_codes.h"
#include "net/wire/msgpack_io.h"

#include <sstream>
#include <zmq.h>

namespace crowdtrain::net {

namespace {

constexpr std::string_view kMagic = "crowdtrain-curve-keypair 1";
constexpr std::size_t kMaxKeyFileBytes = 4096;

Error malformed(const std::string& fileName, int line, const std::string& what)
{
    return Error::make(errc::kMalformedKeyFile, fileName + ":" + std::to_string(line) + ": " + what);
}

} // namespace

Result<CurveKeyPair> generateKeyPair()
{
    if (!zmq_has("curve"))
        return Error::make(errc::kUnsupported, "libzmq was built without CURVE security");
    char publicKey[41] = {};
    char secretKey[41] = {};
    if (zmq_curve_keypair(publicKey, secretKey) != 0)
        return Error::make(errc::kUnsupported, std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
    return CurveKeyPair{publicKey, secretKey};
}

std::string formatKeyPairFile(const CurveKeyPair& keys)
{
    return std::string(kMagic) + "\npublic " + keys.publicKey + "\nsecret " + keys.secretKey + "\n";
}

Result<CurveKeyPair> parseKeyPairFile(std::string_view text, const std::string& fileName)
{
    std::istringstream lines{std::string(text)};
    std::string line;
    int number = 0;
    CurveKeyPair keys;
    while (std::getline(lines, line)) {
        ++number;
        if (number == 1) {
            if (line != kMagic)
                return malformed(fileName, number, "expected \"" + std::string(kMagic) + "\"");
            continue;
        }
        if (line.empty())
            continue;
        const std::size_t space = line.find(' ');
        const std::string name = line.substr(0, space);
        const std::string value = space == std::string::npos ? std::string() : line.substr(space + 1);
        std::string* slot = name == "public" ? &keys.publicKey : name == "secret" ? &keys.secretKey : nullptr;
        if (!slot)
            return malformed(fileName, number, "expected \"public <key>\" or \"secret <key>\"");
        if (!slot->empty())
            return malformed(fileName, number, "\"" + name + "\" given twice");
        if (!isCurveKeyText(value))
            return malformed(fileName, number, "the " + name + " key is not 40 Z85 characters");
        *slot = value;
    }
    if (number == 0)
        return malformed(fileName, 1, "the file is empty");
    if (keys.publicKey.empty() || keys.secretKey.empty())
        return malformed(fileName, number, keys.publicKey.empty() ? "no public key" : "no secret key");
    char derived[41] = {};
    if (zmq_curve_public(derived, keys.secretKey.c_str()) != 0 || keys.publicKey != derived)
        return malformed(fileName, number, "the public key does not belong to the secret key");
    return keys;
}

Result<CurveKeyPair> loadOrCreateKeyPair(const std::filesystem::path& file)
{
    std::error_code ec;
    if (std::filesystem::exists(file, ec)) {
        auto text = core::readFile(file, kMaxKeyFileBytes);
        if (!text)
            return text.error().code == errc::kTooLarge ? Error::make(errc::kMalformedKeyFile, text.error().message)
                                                        : text.error();
        return parseKeyPairFile(*text, file.string());
    }
    auto keys = generateKeyPair();
    if (!keys)
        return keys;
    if (!file.parent_path().empty()) {
        std::filesystem::create_directories(file.parent_path(), ec);
        if (ec)
            return Error::make(
                errc::kIoError, "cannot create folder " + file.parent_path().string() + ": " + ec.message());
    }
    if (Status written = core::writeFileAtomic(file, formatKeyPairFile(*keys), 0600); !written)
        return written.error();
    return keys;
}

} // namespace crowdtrain::net
