#pragma once

// What a volunteer keeps on disk, so that a restart is the same volunteer and
// resumes without downloading again:
//   <data-dir>/identity.key                    its Curve key pair (curve_keys.h)
//   <data-dir>/projects/<project>/theta.f32    theta_v, P float32 little-endian
//   <data-dir>/projects/<project>/theta.meta   its version, element count, SHA-256, manifest
//   <data-dir>/projects/<project>/residual.f32 (+ .meta) the codec's error-feedback residual
//   <data-dir>/projects/<project>/downloads/   resources being fetched (.part + .progress)
// A float file is written atomically before its .meta; on load the SHA-256
// of the bytes must match the .meta, so a torn pair reads as absent, never
// as wrong weights. Thread-safe functions (distinct files).

#include "core/result.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::volunteer {

// $XDG_DATA_HOME/crowdtrain, else $HOME/.local/share/crowdtrain (the XDG
// default). The variables are passed in (nullptr when unset) so the rule can
// be tested. Error "no_data_dir" when neither gives an absolute folder.
Result<std::filesystem::path> defaultDataDir(const char* xdgDataHome, const char* home);
// The same from this process's environment.
Result<std::filesystem::path> defaultDataDir();

// A flat fp32 vector with what it belongs to.
struct StoredFloats {
    uint64_t version = 0; // theta_v: v; the residual: 0
    std::string manifestSha256; // the model it belongs to
    std::string sha256; // of the P float32 little-endian bytes
    std::vector<float> values;
};

// Writes <file> and <file>.meta (sha256 computed here) so that a kill at any
// point leaves the old pair or the new one: the new description goes to
// <file>.meta.next first and is renamed over .meta once <file> is in place.
Status saveFloats(const std::filesystem::path& file, uint64_t version, const std::string& manifestSha256,
    const std::vector<float>& values);
// Reads and verifies a pair (finishing a save that was cut short); nullopt
// when the file or both descriptions are absent. Errors:
// "malformed" (a bad .meta), "checksum_mismatch" (bytes and .meta disagree),
// "io_error".
Result<std::optional<StoredFloats>> loadFloats(const std::filesystem::path& file);
void removeFloats(const std::filesystem::path& file);

// SHA-256 (hex) of values as float32 little-endian bytes: the wire's stateSha256.
std::string floatsSha256(const std::vector<float>& values);
// P float32 little-endian bytes -> values; "bad_size" unless bytes == 4 * elements.
Result<std::vector<float>> floatsFromBytes(const std::string& bytes, uint64_t elements);

// A flat float32 file (the training core's local weights, a downloaded
// state) read front to back, a range at a time, so that its reader never
// holds it whole. Used by one thread.
class FloatFileReader {
public:
    // Errors: "not_found", "bad_size" (the file does not hold exactly
    // `elements` float32 values), "io_error".
    static Result<FloatFileReader> open(const std::filesystem::path& file, uint64_t elements);

    // The next `count` values into out. "io_error" (a short read names the file).
    Status read(float* out, uint64_t count);
    uint64_t elements() const { return m_elements; }

private:
    struct Closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    std::filesystem::path m_file;
    std::unique_ptr<std::FILE, Closer> m_handle;
    uint64_t m_elements = 0;
};

// The whole file, read straight into the vector (no byte string on the
// way). Errors as FloatFileReader's.
Result<std::vector<float>> readFloatFile(const std::filesystem::path& file, uint64_t elements);
// "non_finite" unless every value of the file is finite; read a range at a time.
Status checkFloatFileFinite(const std::filesystem::path& file, uint64_t elements);

// One project's folder under a data folder.
class ProjectFolder {
public:
    // Creates <dataDir>/projects/<project>/downloads. Error "bad_project"
    // unless the name is a slug [a-z0-9-]{1,64}; "io_error".
    static Result<ProjectFolder> open(const std::filesystem::path& dataDir, const std::string& project);

    const std::filesystem::path& dir() const { return m_dir; }
    std::filesystem::path thetaFile() const { return m_dir / "theta.f32"; }
    std::filesystem::path residualFile() const { return m_dir / "residual.f32"; }
    std::filesystem::path downloadsDir() const { return m_dir / "downloads"; }
    // Where a resource is downloaded to (its .part files sit next to it).
    std::filesystem::path downloadTarget(const std::string& resource) const;
    // Removes downloads (and their partial files) of every other resource:
    // a restart resumes the one it needs, old versions' leftovers go.
    void pruneDownloads(const std::string& keepResource) const;

private:
    explicit ProjectFolder(std::filesystem::path dir)
        : m_dir(std::move(dir))
    { }
    std::filesystem::path m_dir;
};

std::filesystem::path identityKeyFile(const std::filesystem::path& dataDir);

// A server key given as Z85 text (40 characters) or as "@FILE" / a file
// holding it (the first 40-character word; a key-pair file's "public" line
// is accepted too). Error "bad_server_key".
Result<std::string> resolveServerKey(const std::string& keyOrFile);

} // namespace crowdtrain::volunteer
