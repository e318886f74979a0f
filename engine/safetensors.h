#pragma once

// The safetensors file format (huggingface/safetensors), written from its
// spec: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {"k": "v"}, "NAME": {"dtype": "F32", "shape": [2, 3],
//    "data_offsets": [begin, end]}, ...}
// padded with spaces, then the data buffer. Offsets are relative to the
// buffer; tensors are row-major, little-endian and cover the buffer exactly.
//
// Free functions without shared state: safe to call from any thread, on
// different files.

#include "core/result.h"

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace crowdtrain::engine {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsFile {
    NamedTensors tensors; // in the order of their data in the file
    std::map<std::string, std::string> metadata;
};

// The header holds at most this much JSON (the reference reader's limit).
inline constexpr std::uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Writes `file` via a temporary name, fsync and rename. The layout matches
// the reference writer (safetensors' Rust `serialize`) byte for byte: data
// ordered by descending dtype alignment, then by name; the header lists
// "__metadata__" first (omitted when empty, keys sorted), then the tensors in
// data order, as compact JSON padded with spaces so the buffer starts at a
// multiple of 8. Tensors may live on any device and have any strides.
Status writeSafetensors(const std::filesystem::path& file, const NamedTensors& tensors,
    const std::map<std::string, std::string>& metadata = {});

// The bytes writeSafetensors() would write, for small files and tests.
Result<std::string> serializeSafetensors(
    const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole file (header length, JSON, dtypes, shapes,
// offsets contiguous from 0 with no overlap or hole, exact file size, BOOL
// bytes 0 or 1); each tensor's bytes are read once, straight into its own CPU
// storage. Errors name the file and the problem.
Result<SafetensorsFile> readSafetensors(const std::filesystem::path& file);

// "F32" <-> torch::kFloat32 and so on for F64, F32, F16, BF16, I64, I32, I16,
// I8, U8, BOOL.
std::optional<torch::Dtype> safetensorsDtype(const std::string& name);
std::optional<std::string> safetensorsDtypeName(torch::Dtype dtype);

} // namespace crowdtrain::engine
