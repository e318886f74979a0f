#include "engine/safetensors.h"

#include "core/file_io.h"
#include "engine/error_codes.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <fstream>
#include <limits>
#include <set>
#include <system_error>

namespace crowdtrain::engine {
namespace {

// The format is little-endian; we copy tensor bytes as they are in memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

struct DtypeInfo {
    const char* name;
    torch::Dtype dtype;
    // Position in the reference implementation's Dtype enum, which its writer
    // sorts by (descending) so that every tensor's data stays aligned.
    int alignmentRank;
};

const std::array<DtypeInfo, 10> kDtypes{{
    {"BOOL", torch::kBool, 0},
    {"U8", torch::kUInt8, 1},
    {"I8", torch::kInt8, 2},
    {"I16", torch::kInt16, 5},
    {"F16", torch::kFloat16, 7},
    {"BF16", torch::kBFloat16, 8},
    {"I32", torch::kInt32, 9},
    {"F32", torch::kFloat32, 11},
    {"F64", torch::kFloat64, 12},
    {"I64", torch::kInt64, 13},
}};

const DtypeInfo* dtypeInfo(torch::Dtype dtype)
{
    for (const auto& info : kDtypes) {
        if (info.dtype == dtype)
            return &info;
    }
    return nullptr;
}

struct PreparedTensor {
    std::string name;
    torch::Tensor data; // any device and strides: copied to the CPU one at a time when written
};

// The bytes of one tensor as the file stores them.
torch::Tensor hostBytes(const torch::Tensor& tensor)
{
    return tensor.detach().to(torch::kCPU).contiguous();
}

struct Prepared {
    std::string headerLengthAndJson; // 8-byte length + padded JSON
    std::vector<PreparedTensor> tensors; // in data order
};

Result<Prepared> prepare(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata)
{
    Prepared prepared;
    std::set<std::string> names;
    std::vector<std::pair<const DtypeInfo*, PreparedTensor>> sorted;
    for (const auto& [name, tensor] : tensors) {
        if (name.empty() || name == "__metadata__")
            return Error::make(errc::kBadTensor, "tensor name '" + name + "' is not allowed in a safetensors file");
        if (!names.insert(name).second)
            return Error::make(errc::kBadTensor, "tensor name '" + name + "' appears twice");
        if (!tensor.defined() || tensor.layout() != torch::kStrided)
            return Error::make(errc::kBadTensor, "tensor '" + name + "' is undefined or not dense");
        const DtypeInfo* info = dtypeInfo(tensor.scalar_type());
        if (info == nullptr)
            return Error::make(errc::kBadTensor,
                "tensor '" + name + "' has dtype " + std::string(c10::toString(tensor.scalar_type()))
                    + ", which safetensors files here do not support");
        sorted.push_back({info, {name, tensor}});
    }
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
        if (a.first->alignmentRank != b.first->alignmentRank)
            return a.first->alignmentRank > b.first->alignmentRank;
        return a.second.name < b.second.name;
    });

    // ordered_json keeps insertion order: metadata first, then data order,
    // which is what the reference writer produces.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json meta = nlohmann::ordered_json::object();
        for (const auto& [key, value] : metadata)
            meta[key] = value;
        header["__metadata__"] = std::move(meta);
    }
    std::uint64_t offset = 0;
    for (auto& [info, tensor] : sorted) {
        const auto bytes = static_cast<std::uint64_t>(tensor.data.nbytes());
        header[tensor.name] = {
            {"dtype", info->name},
            {"shape", tensor.data.sizes().vec()},
            {"data_offsets", {offset, offset + bytes}},
        };
        offset += bytes;
        prepared.tensors.push_back(std::move(tensor));
    }

    std::string json;
    try {
        json = header.dump();
    } catch (const nlohmann::json::exception& e) {
        return Error::make(errc::kBadTensor, std::string("tensor names and metadata must be valid UTF-8: ") + e.what());
    }
    json.append((8 - json.size() % 8) % 8, ' ');
    std::uint64_t length = json.size();
    std::string& out = prepared.headerLengthAndJson;
    for (int i = 0; i < 8; ++i)
        out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
    out += json;
    return prepared;
}

struct Entry {
    std::string name;
    const DtypeInfo* dtype = nullptr;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
};

Error formatError(const std::filesystem::path& file, std::string_view code, const std::string& problem)
{
    return Error::make(code, "'" + file.string() + "' is not a valid safetensors file: " + problem);
}

std::string range(std::uint64_t begin, std::uint64_t end)
{
    return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

Result<Entry> parseEntry(const std::filesystem::path& file, const std::string& name, const nlohmann::json& value)
{
    const std::string tensor = "tensor '" + name + "'";
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") || !value.contains("data_offsets"))
        return formatError(
            file, errc::kSafetensorsHeader, tensor + " needs an object with dtype, shape and data_offsets");
    Entry entry;
    entry.name = name;
    const auto& dtype = value["dtype"];
    if (dtype.is_string()) {
        for (const auto& info : kDtypes) {
            if (dtype.get<std::string>() == info.name)
                entry.dtype = &info;
        }
    }
    if (entry.dtype == nullptr)
        return formatError(file, errc::kSafetensorsDtype,
            tensor + " has dtype " + dtype.dump() + "; supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL");

    const auto& shape = value["shape"];
    if (!shape.is_array())
        return formatError(file, errc::kSafetensorsHeader, tensor + ": shape must be an array");
    std::uint64_t elements = 1;
    for (const auto& dim : shape) {
        if (!dim.is_number_unsigned() || dim.get<std::uint64_t>() > std::numeric_limits<std::int64_t>::max())
            return formatError(
                file, errc::kSafetensorsHeader, tensor + ": shape " + shape.dump() + " is not a list of sizes");
        const auto size = dim.get<std::uint64_t>();
        if (size != 0 && elements > std::numeric_limits<std::uint64_t>::max() / size)
            return formatError(file, errc::kSafetensorsShape, tensor + ": shape " + shape.dump() + " overflows");
        elements *= size;
        entry.shape.push_back(static_cast<std::int64_t>(size));
    }
    const auto elementBytes = static_cast<std::uint64_t>(c10::elementSize(entry.dtype->dtype));
    if (elements > std::numeric_limits<std::uint64_t>::max() / elementBytes)
        return formatError(file, errc::kSafetensorsShape, tensor + ": shape " + shape.dump() + " overflows");

    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned()
        || !offsets[1].is_number_unsigned() || offsets[0].get<std::uint64_t>() > offsets[1].get<std::uint64_t>())
        return formatError(file, errc::kSafetensorsOffsets,
            tensor + ": data_offsets " + offsets.dump() + " is not a [begin, end] pair");
    entry.begin = offsets[0].get<std::uint64_t>();
    entry.end = offsets[1].get<std::uint64_t>();
    if (entry.end - entry.begin != elements * elementBytes)
        return formatError(file, errc::kSafetensorsShape,
            tensor + ": shape " + shape.dump() + " of " + entry.dtype->name + " needs "
                + std::to_string(elements * elementBytes) + " bytes but data_offsets " + offsets.dump() + " hold "
                + std::to_string(entry.end - entry.begin));
    return entry;
}

// The header, validated against itself and the file size.
Result<std::vector<Entry>> parseHeader(const std::filesystem::path& file, const std::string& json,
    std::uint64_t bufferBytes, std::map<std::string, std::string>& metadata)
{
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(json);
    } catch (const nlohmann::json::exception& e) {
        return formatError(
            file, errc::kSafetensorsJson, std::string("the header is not valid JSON (") + e.what() + ")");
    }
    if (!header.is_object())
        return formatError(file, errc::kSafetensorsJson, "the header is not a JSON object");

    std::vector<Entry> entries;
    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            if (!value.is_object())
                return formatError(file, errc::kSafetensorsHeader, "__metadata__ must be an object of strings");
            for (const auto& [metaKey, metaValue] : value.items()) {
                if (!metaValue.is_string())
                    return formatError(
                        file, errc::kSafetensorsHeader, "__metadata__ value for '" + metaKey + "' is not a string");
                metadata[metaKey] = metaValue.get<std::string>();
            }
            continue;
        }
        auto entry = parseEntry(file, key, value);
        if (!entry)
            return entry.error();
        entries.push_back(std::move(*entry));
    }

    // Any header order is valid; the data must still tile the buffer.
    std::stable_sort(entries.begin(), entries.end(),
        [](const Entry& a, const Entry& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
    std::uint64_t expected = 0;
    const Entry* previous = nullptr;
    for (const auto& entry : entries) {
        if (entry.begin < expected)
            return formatError(file, errc::kSafetensorsOffsets,
                "tensor '" + entry.name + "' at " + range(entry.begin, entry.end) + " overlaps tensor '"
                    + previous->name + "' at " + range(previous->begin, previous->end));
        if (entry.begin > expected)
            return formatError(file, errc::kSafetensorsOffsets,
                "bytes " + range(expected, entry.begin) + " before tensor '" + entry.name + "' belong to no tensor");
        expected = entry.end;
        previous = &entry;
    }
    if (expected > bufferBytes)
        return formatError(file, errc::kSafetensorsTruncated,
            "the tensors need " + std::to_string(expected) + " bytes of data but only " + std::to_string(bufferBytes)
                + " follow the header (truncated file?)");
    if (expected < bufferBytes)
        return formatError(file, errc::kSafetensorsOffsets,
            "bytes " + range(expected, bufferBytes) + " after the last tensor belong to no tensor");
    return entries;
}

Result<SafetensorsFile> readFile(const std::filesystem::path& file)
{
    std::error_code error;
    const std::uint64_t fileBytes = std::filesystem::file_size(file, error);
    if (error)
        return Error::make(errc::kIoError, "cannot read '" + file.string() + "': " + error.message());
    std::ifstream in(file, std::ios::binary);
    if (!in)
        return Error::make(errc::kIoError, "cannot open '" + file.string() + "'");

    if (fileBytes < 8)
        return formatError(file, errc::kSafetensorsTruncated,
            "it is " + std::to_string(fileBytes) + " bytes long, shorter than the 8-byte header length");
    std::array<unsigned char, 8> lengthBytes{};
    in.read(reinterpret_cast<char*>(lengthBytes.data()), 8);
    std::uint64_t headerBytes = 0;
    for (int i = 7; i >= 0; --i)
        headerBytes = (headerBytes << 8) | lengthBytes[i];
    if (headerBytes > kSafetensorsMaxHeaderBytes)
        return formatError(file, errc::kSafetensorsHeader,
            "header length " + std::to_string(headerBytes) + " exceeds the limit of "
                + std::to_string(kSafetensorsMaxHeaderBytes) + " bytes");
    if (headerBytes > fileBytes - 8)
        return formatError(file, errc::kSafetensorsTruncated,
            "header length " + std::to_string(headerBytes) + " runs past the end of the file ("
                + std::to_string(fileBytes) + " bytes)");
    std::string json(headerBytes, '\0');
    in.read(json.data(), static_cast<std::streamsize>(headerBytes));
    if (!in)
        return Error::make(errc::kIoError, "cannot read the header of '" + file.string() + "'");

    SafetensorsFile result;
    auto entries = parseHeader(file, json, fileBytes - 8 - headerBytes, result.metadata);
    if (!entries)
        return entries.error();
    for (const auto& entry : *entries) {
        torch::Tensor tensor = torch::empty(entry.shape, torch::TensorOptions().dtype(entry.dtype->dtype));
        const auto bytes = static_cast<std::streamsize>(entry.end - entry.begin);
        if (bytes > 0 && !in.read(static_cast<char*>(tensor.data_ptr()), bytes))
            return Error::make(errc::kIoError, "cannot read tensor '" + entry.name + "' from '" + file.string() + "'");
        if (entry.dtype->dtype == torch::kBool && tensor.view(torch::kUInt8).gt(1).any().item<bool>())
            return formatError(
                file, errc::kSafetensorsBool, "BOOL tensor '" + entry.name + "' holds bytes other than 0 and 1");
        result.tensors.emplace_back(entry.name, std::move(tensor));
    }
    return result;
}

} // namespace

std::optional<torch::Dtype> safetensorsDtype(const std::string& name)
{
    for (const auto& info : kDtypes) {
        if (name == info.name)
            return info.dtype;
    }
    return std::nullopt;
}

std::optional<std::string> safetensorsDtypeName(torch::Dtype dtype)
{
    const DtypeInfo* info = dtypeInfo(dtype);
    if (info == nullptr)
        return std::nullopt;
    return std::string(info->name);
}

Status writeSafetensors(
    const std::filesystem::path& file, const NamedTensors& tensors, const std::map<std::string, std::string>& metadata)
{
    try {
        auto prepared = prepare(tensors, metadata);
        if (!prepared)
            return Error::make(prepared.error().code, "'" + file.string() + "': " + prepared.error().message);
        auto out = core::AtomicFile::create(file);
        if (!out)
            return out.error();
        if (Status written = out->write(prepared->headerLengthAndJson); !written)
            return written;
        for (const auto& tensor : prepared->tensors) {
            const torch::Tensor host = hostBytes(tensor.data);
            if (Status written = out->write(host.data_ptr(), host.nbytes()); !written)
                return written;
        }
        return out->commit();
    } catch (const std::exception& e) {
        // c10::Error derives from std::exception (moving a tensor to the CPU).
        return Error::make(errc::kIoError, "cannot write '" + file.string() + "': " + e.what());
    }
}

Result<std::string> serializeSafetensors(
    const NamedTensors& tensors, const std::map<std::string, std::string>& metadata)
{
    try {
        auto prepared = prepare(tensors, metadata);
        if (!prepared)
            return prepared.error();
        std::string bytes = std::move(prepared->headerLengthAndJson);
        for (const auto& tensor : prepared->tensors) {
            const torch::Tensor host = hostBytes(tensor.data);
            if (host.nbytes() > 0)
                bytes.append(static_cast<const char*>(host.data_ptr()), host.nbytes());
        }
        return bytes;
    } catch (const std::exception& e) {
        return Error::make(errc::kBadTensor, std::string("cannot serialize tensors: ") + e.what());
    }
}

Result<SafetensorsFile> readSafetensors(const std::filesystem::path& file)
{
    try {
        return readFile(file);
    } catch (const std::exception& e) {
        // c10::Error (allocation) and std::bad_alloc end up here.
        return Error::make(errc::kIoError, "cannot read '" + file.string() + "': " + e.what());
    }
}

} // namespace crowdtrain::engine
