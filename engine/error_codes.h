#pragma once

// The engine's error codes (Error::code, core/result.h), each spelled once:
// short stable tokens for programs; the message says the rest to a person.
// A word core/ already has is not spelled again. Header-only, like
// result.h, so that every layer can use them without linking the engine.
// net/wire/error_codes.h reuses these and adds the protocol's and net's own
// codes, with which of them may travel.

#include "core/error_codes.h"

#include <string_view>

namespace crowdtrain::engine::errc {

// core/'s codes, io_error and not_found among them, are the engine's too.
using namespace core::errc;

// Files, arguments and state, in every part of the engine.
inline constexpr std::string_view kBadArgument = "bad_argument";
inline constexpr std::string_view kBadOptions = "bad_options";
inline constexpr std::string_view kBadFile = "bad_file"; // a file of ours that does not parse
inline constexpr std::string_view kBadOutput = "bad_output"; // an output folder that cannot be used
inline constexpr std::string_view kInvalidUtf8 = "invalid_utf8";
inline constexpr std::string_view kBadState = "bad_state"; // a call out of order
inline constexpr std::string_view kEmpty = "empty";

// Devices and training.
inline constexpr std::string_view kBadDevice = "bad_device";
inline constexpr std::string_view kNoDevice = "no_device";
inline constexpr std::string_view kTrainingFailed = "training_failed";
inline constexpr std::string_view kRendezvousFailed = "rendezvous_failed";
inline constexpr std::string_view kSaveFailed = "save_failed";
inline constexpr std::string_view kBadCheckpoint = "bad_checkpoint";

// Models and checkpoint formats.
inline constexpr std::string_view kUnknownModel = "unknown_model";
inline constexpr std::string_view kBadConfig = "bad_config";
inline constexpr std::string_view kBadWeights = "bad_weights";
inline constexpr std::string_view kBadTensor = "bad_tensor";
inline constexpr std::string_view kBadExport = "bad_export";
inline constexpr std::string_view kBadHfCheckpoint = "bad_hf_checkpoint";
inline constexpr std::string_view kBadHfConfig = "bad_hf_config";
inline constexpr std::string_view kSafetensorsTruncated = "safetensors_truncated";
inline constexpr std::string_view kSafetensorsJson = "safetensors_json";
inline constexpr std::string_view kSafetensorsHeader = "safetensors_header";
inline constexpr std::string_view kSafetensorsDtype = "safetensors_dtype";
inline constexpr std::string_view kSafetensorsShape = "safetensors_shape";
inline constexpr std::string_view kSafetensorsOffsets = "safetensors_offsets";
inline constexpr std::string_view kSafetensorsBool = "safetensors_bool";

// The data pipeline: tokenizers, corpora, token shards.
inline constexpr std::string_view kBadTokenizer = "bad_tokenizer";
inline constexpr std::string_view kEmptyVocabulary = "empty_vocabulary";
inline constexpr std::string_view kVocabularyTooLarge = "vocabulary_too_large";
inline constexpr std::string_view kUnknownChar = "unknown_char";
inline constexpr std::string_view kCorpusTooSmall = "corpus_too_small";
inline constexpr std::string_view kBadDataSet = "bad_data_set";
inline constexpr std::string_view kBadShard = "bad_shard";
inline constexpr std::string_view kShardTooLarge = "shard_too_large";
inline constexpr std::string_view kDataTooShort = "data_too_short";

// DiLoCo (engine/diloco): codecs, aggregation, the norm gate.
inline constexpr std::string_view kBadCodec = "bad_codec";
inline constexpr std::string_view kBadSize = "bad_size"; // a payload or vector of the wrong length
inline constexpr std::string_view kNonFinite = "non_finite"; // NaN or infinity (also a protocol code)
// A sparse payload's index outside its chunk, repeated or out of order.
inline constexpr std::string_view kBadIndex = "bad_index";
inline constexpr std::string_view kBadWeight = "bad_weight";
inline constexpr std::string_view kAggregatorFailed = "aggregator_failed";
// NormGate's reasons (the token before ':' of NormGate::check, and
// SubmissionVerdict::reason).
inline constexpr std::string_view kNormTooLarge = "norm_too_large";
inline constexpr std::string_view kNormTooSmall = "norm_too_small";
inline constexpr std::string_view kDirection = "direction";

} // namespace crowdtrain::engine::errc
