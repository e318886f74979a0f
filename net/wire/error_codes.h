#pragma once

// Every error code of net/, spelled once (as zguide keeps a protocol's
// constants in one header), and what each means for control flow. Codes are
// Error::code (core/result.h); an error reply carries one on the wire
// (docs/protocol.md section 2, "Error replies"). The engine's own codes are
// in engine/error_codes.h and core's in core/error_codes.h, reachable here
// too (net::errc::kIoError); no word is spelled in two of them.
//
// Control flow asks the table (kErrorCodes) rather than keeping lists:
// isProtocolCode, isConnectionError, isFatalForVolunteer, isFinalForDownload.
// Header-only: every layer may use it.

#include "core/result.h"
#include "engine/error_codes.h"
#include "net/wire/limits.h"

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

namespace crowdtrain::net::errc {

using namespace engine::errc;

// (a) The protocol's codes: a coordinator answers with these and only these
// (docs/protocol.md section 2 lists them; kNonFinite and kBadIndex are the
// engine's, kNotFound and kTooLarge core's). Byte-identical to the contract: never rename one.
inline constexpr std::string_view kMalformed = "malformed";
inline constexpr std::string_view kUnsupportedVersion = "unsupported_version";
inline constexpr std::string_view kUnknownType = "unknown_type";
inline constexpr std::string_view kUnknownProject = "unknown_project";
inline constexpr std::string_view kNotJoined = "not_joined";
inline constexpr std::string_view kStaleVersion = "stale_version";
inline constexpr std::string_view kUnknownTask = "unknown_task";
inline constexpr std::string_view kBadShape = "bad_shape";
inline constexpr std::string_view kBadTokens = "bad_tokens";
inline constexpr std::string_view kChecksumMismatch = "checksum_mismatch";
inline constexpr std::string_view kNormOutOfBounds = "norm_out_of_bounds";
inline constexpr std::string_view kDirectionOutOfBounds = "direction_out_of_bounds";
// Applied alone, the update makes the loss on held-out windows worse than honest work does (trust.evaluate).
inline constexpr std::string_view kLossOutOfBounds = "loss_out_of_bounds";
// The payload was accepted before, from this key or another (no credit twice).
inline constexpr std::string_view kDuplicatePayload = "duplicate_payload";
inline constexpr std::string_view kUnavailable = "unavailable";
inline constexpr std::string_view kForbidden = "forbidden"; // the project's terms refuse this key
inline constexpr std::string_view kInternal = "internal";

// (b) Local codes of the wire, transport and transfer layers; they never
// travel (a coordinator sends them as kInternal).
inline constexpr std::string_view kTimeout = "timeout"; // no reply within the request's timeout
inline constexpr std::string_view kSendFailed = "send_failed"; // the frame could not be queued
inline constexpr std::string_view kZmqError = "zmq_error";
inline constexpr std::string_view kCancelled = "cancelled";
inline constexpr std::string_view kLimitExceeded = "limit_exceeded"; // the unpacker's caps (decoded as kTooLarge)
inline constexpr std::string_view kTrailingBytes = "trailing_bytes"; // (decoded as kMalformed)
inline constexpr std::string_view kInvalidArgument = "invalid_argument";
inline constexpr std::string_view kAddressInUse = "address_in_use";
inline constexpr std::string_view kExists = "exists";
inline constexpr std::string_view kMalformedKeyFile = "malformed_key_file";
inline constexpr std::string_view kUnsupported = "unsupported"; // libzmq without CURVE

// (c) The volunteer's local codes (net/volunteer); kNoDataDir is core's.
inline constexpr std::string_view kBadProject = "bad_project";
inline constexpr std::string_view kBadServerKey = "bad_server_key";
inline constexpr std::string_view kManifestMismatch = "manifest_mismatch";
inline constexpr std::string_view kMissingShard = "missing_shard";
inline constexpr std::string_view kShardMismatch = "shard_mismatch";
inline constexpr std::string_view kBadShardName = "bad_shard_name";
inline constexpr std::string_view kBadRange = "bad_range";
inline constexpr std::string_view kUploadStalled = "upload_stalled";
// The training core (crowdtrain-core, docs/protocol.md §13) died, could not
// start or sent what is not a frame; hung: it stopped reporting steps.
inline constexpr std::string_view kCoreFailed = "core_failed";
inline constexpr std::string_view kCoreHung = "core_hung";

// (d) The coordinator's local codes (net/coordinator): faults on the
// server's side, answered as kInternal with the code in the message.
inline constexpr std::string_view kBadSpec = "bad_spec";
inline constexpr std::string_view kBadDataPlan = "bad_data_plan";
inline constexpr std::string_view kBadParameters = "bad_parameters";
inline constexpr std::string_view kBadCommit = "bad_commit";
inline constexpr std::string_view kStateCorrupt = "state_corrupt";
inline constexpr std::string_view kStateMismatch = "state_mismatch";
inline constexpr std::string_view kNoState = "no_state";
inline constexpr std::string_view kNoUpdate = "no_update";
inline constexpr std::string_view kCheckpointExists = "checkpoint_exists";
inline constexpr std::string_view kLedgerError = "ledger_error";
inline constexpr std::string_view kLedgerCorrupt = "ledger_corrupt";
inline constexpr std::string_view kLedgerVersion = "ledger_version";
inline constexpr std::string_view kLedgerForeign = "ledger_foreign";
inline constexpr std::string_view kStaleLease = "stale_lease";
inline constexpr std::string_view kUnknownLease = "unknown_lease";
inline constexpr std::string_view kUnknownRange = "unknown_range";
inline constexpr std::string_view kProjectFailed = "project_failed";
inline constexpr std::string_view kPollFailed = "poll_failed";

} // namespace crowdtrain::net::errc

namespace crowdtrain::net {

// What a code means to the code that handles it. A code missing from the
// table has no trait.
struct ErrorCodeInfo {
    std::string_view code;
    // A coordinator may answer with it: an error reply never carries
    // another code (docs/protocol.md section 2).
    bool protocol = false;
    // No answer came (the coordinator may be gone or slow): reconnect and
    // retry, never a verdict. Never on the wire.
    bool connection = false;
    // This machine's set-up is wrong (its files, device, options, keys):
    // retrying cannot fix it, so crowdtrain-worker stops.
    bool fatalForVolunteer = false;
    // A Download stops rather than fetching again (the resource is gone or
    // the exchange is broken).
    bool finalForDownload = false;
};

inline constexpr ErrorCodeInfo kErrorCodes[] = {
    // (a) protocol codes
    {.code = errc::kMalformed, .protocol = true, .finalForDownload = true},
    {.code = errc::kUnsupportedVersion, .protocol = true, .finalForDownload = true},
    {.code = errc::kUnknownType, .protocol = true, .finalForDownload = true},
    {.code = errc::kTooLarge, .protocol = true},
    {.code = errc::kUnknownProject, .protocol = true},
    {.code = errc::kNotJoined, .protocol = true},
    {.code = errc::kStaleVersion, .protocol = true},
    {.code = errc::kUnknownTask, .protocol = true},
    {.code = errc::kBadShape, .protocol = true},
    {.code = errc::kBadTokens, .protocol = true},
    {.code = errc::kChecksumMismatch, .protocol = true},
    {.code = errc::kNonFinite, .protocol = true},
    {.code = errc::kNormOutOfBounds, .protocol = true},
    {.code = errc::kDirectionOutOfBounds, .protocol = true},
    {.code = errc::kLossOutOfBounds, .protocol = true},
    {.code = errc::kDuplicatePayload, .protocol = true},
    {.code = errc::kNotFound, .protocol = true, .finalForDownload = true},
    {.code = errc::kBadIndex, .protocol = true, .finalForDownload = true},
    {.code = errc::kUnavailable, .protocol = true},
    {.code = errc::kForbidden, .protocol = true, .finalForDownload = true},
    {.code = errc::kInternal, .protocol = true},
    // (b) wire, transport and transfer
    {.code = errc::kTimeout, .connection = true},
    {.code = errc::kSendFailed, .connection = true},
    {.code = errc::kZmqError, .connection = true},
    {.code = errc::kCancelled},
    {.code = errc::kIoError, .fatalForVolunteer = true},
    {.code = errc::kLimitExceeded},
    {.code = errc::kTrailingBytes},
    {.code = errc::kInvalidArgument},
    {.code = errc::kAddressInUse},
    {.code = errc::kExists},
    {.code = errc::kMalformedKeyFile, .fatalForVolunteer = true},
    {.code = errc::kUnsupported, .fatalForVolunteer = true},
    // (c) the volunteer, and the engine's codes it meets
    {.code = errc::kNoDataDir, .fatalForVolunteer = true},
    {.code = errc::kBadProject, .fatalForVolunteer = true},
    {.code = errc::kBadServerKey, .fatalForVolunteer = true},
    {.code = errc::kManifestMismatch, .fatalForVolunteer = true},
    {.code = errc::kMissingShard, .fatalForVolunteer = true},
    {.code = errc::kShardMismatch, .fatalForVolunteer = true},
    {.code = errc::kBadShardName, .fatalForVolunteer = true},
    {.code = errc::kBadRange},
    {.code = errc::kUploadStalled},
    {.code = errc::kBadDevice, .fatalForVolunteer = true},
    {.code = errc::kNoDevice, .fatalForVolunteer = true},
    {.code = errc::kBadOptions, .fatalForVolunteer = true},
    {.code = errc::kBadCodec, .fatalForVolunteer = true},
    {.code = errc::kBadSize},
    {.code = errc::kTrainingFailed},
    {.code = errc::kCoreFailed},
    {.code = errc::kCoreHung},
    // (d) the coordinator
    {.code = errc::kBadSpec},
    {.code = errc::kBadDataPlan},
    {.code = errc::kBadParameters},
    {.code = errc::kBadCommit},
    {.code = errc::kStateCorrupt},
    {.code = errc::kStateMismatch},
    {.code = errc::kNoState},
    {.code = errc::kNoUpdate},
    {.code = errc::kCheckpointExists},
    {.code = errc::kLedgerError},
    {.code = errc::kLedgerCorrupt},
    {.code = errc::kLedgerVersion},
    {.code = errc::kLedgerForeign},
    {.code = errc::kStaleLease},
    {.code = errc::kUnknownLease},
    {.code = errc::kUnknownRange},
    {.code = errc::kProjectFailed},
    {.code = errc::kPollFailed},
};

// The row of `code`, or nullptr.
constexpr const ErrorCodeInfo* findErrorCode(std::string_view code)
{
    for (const ErrorCodeInfo& info : kErrorCodes)
        if (info.code == code)
            return &info;
    return nullptr;
}

// A code of docs/protocol.md's list: a coordinator may send it, a client may get it.
constexpr bool isProtocolCode(std::string_view code)
{
    const ErrorCodeInfo* info = findErrorCode(code);
    return info && info->protocol;
}

// "No answer" rather than "the server said no".
constexpr bool isConnectionError(std::string_view code)
{
    const ErrorCodeInfo* info = findErrorCode(code);
    return info && info->connection;
}

constexpr bool isFatalForVolunteer(std::string_view code)
{
    const ErrorCodeInfo* info = findErrorCode(code);
    return info && info->fatalForVolunteer;
}

constexpr bool isFinalForDownload(std::string_view code)
{
    const ErrorCodeInfo* info = findErrorCode(code);
    return info && info->finalForDownload;
}

// What a coordinator may send for `error`: itself when its code is a
// protocol code, else kInternal with the original code leading the message.
inline Error protocolError(const Error& error)
{
    if (isProtocolCode(error.code))
        return error;
    return Error::make(errc::kInternal, error.code + ": " + error.message);
}

namespace detail {

constexpr bool errorCodesAreDistinct()
{
    for (std::size_t i = 0; i < std::size(kErrorCodes); ++i)
        for (std::size_t j = i + 1; j < std::size(kErrorCodes); ++j)
            if (kErrorCodes[i].code == kErrorCodes[j].code)
                return false;
    return true;
}

// A protocol code fits an error reply (kMaxErrorCodeChars, limits.h) and
// is never also a local trait.
constexpr bool protocolCodesAreWireCodes()
{
    for (const ErrorCodeInfo& info : kErrorCodes)
        if (info.protocol && (info.code.size() > kMaxErrorCodeChars || info.connection || info.fatalForVolunteer))
            return false;
    return true;
}

} // namespace detail

static_assert(detail::errorCodesAreDistinct(), "an error code is listed twice in kErrorCodes");
static_assert(detail::protocolCodesAreWireCodes(), "a protocol code is too long or has a local trait");

} // namespace crowdtrain::net
