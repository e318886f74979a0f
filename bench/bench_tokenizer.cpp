// Tokenizer throughput: encodes Tiny Shakespeare with GPT-2's BPE on one
// thread and prints a markdown table. Not a timed test; results are recorded
// in bench/RESULTS.md.
//
//   bench_tokenizer [GPT2_DIR [TEXT_FILE [REPEATS]]]
#include "engine/bpe_tokenizer.h"
#include "engine/char_tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace crowdtrain::engine;

namespace {

using Clock = std::chrono::steady_clock;

struct Row {
    std::string what;
    double seconds; // best of the repeats
    std::size_t tokens;
};

template <typename Encode> Row measure(const std::string& what, int repeats, Encode encode)
{
    Row row{what, 1e9, 0};
    for (int i = 0; i < repeats; ++i) {
        const auto start = Clock::now();
        row.tokens = encode();
        row.seconds = std::min(row.seconds, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return row;
}

} // namespace

int main(int argc, char** argv)
{
    const std::string gpt2Dir = argc > 1 ? argv[1] : CROWDTRAIN_SHARED_DATA_DIR "/gpt2";
    const std::string textFile = argc > 2 ? argv[2] : CROWDTRAIN_SHARED_DATA_DIR "/tinyshakespeare.txt";
    const int repeats = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;

    std::ifstream in(textFile, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "bench_tokenizer: cannot open %s\n", textFile.c_str());
        return 1;
    }
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    if ((!in.good() && !in.eof()) || text.empty()) {
        std::fprintf(stderr, "bench_tokenizer: cannot read %s (or it is empty)\n", textFile.c_str());
        return 1;
    }
    const auto loadStart = Clock::now();
    auto bpe = BpeTokenizer::load(gpt2Dir);
    const double loadSeconds = std::chrono::duration<double>(Clock::now() - loadStart).count();
    if (!bpe) {
        std::fprintf(stderr, "bench_tokenizer: %s\n", bpe.error().message.c_str());
        return 1;
    }
    std::vector<std::string_view> lines;
    for (std::size_t start = 0; start < text.size();) {
        const std::size_t end = std::min(text.find('\n', start), text.size() - 1) + 1;
        lines.emplace_back(text.data() + start, end - start);
        start = end;
    }
    auto chars = CharTokenizer::fromText(text);

    std::vector<Row> rows;
    rows.push_back(measure("gpt2-bpe, whole file in one call", repeats, [&] { return (*bpe)->encode(text).size(); }));
    rows.push_back(measure("gpt2-bpe, line by line", repeats, [&] {
        std::size_t tokens = 0;
        for (const auto line : lines)
            tokens += (*bpe)->encode(line).size();
        return tokens;
    }));
    if (chars)
        rows.push_back(measure("char, whole file", repeats, [&] { return (*chars)->encode(text).size(); }));

    std::printf("%s: %zu bytes, best of %d runs, one thread; loading the GPT-2 vocabulary took %.2f s\n\n",
        textFile.c_str(), text.size(), repeats, loadSeconds);
    std::printf("| encode | MB/s | tokens/s | tokens |\n|---|---:|---:|---:|\n");
    for (const Row& row : rows)
        std::printf("| %s | %.1f | %.0f | %zu |\n", row.what.c_str(),
            static_cast<double>(text.size()) / 1e6 / row.seconds, static_cast<double>(row.tokens) / row.seconds,
            row.tokens);
    return 0;
}
