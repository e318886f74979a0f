// crowdtrain-prepare: text corpus -> tokenizer + token shards for a project,
// and tokenize/detokenize with a prepared tokenizer.
#include "app/args.h"
#include "engine/data_prepare.h"
#include "engine/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <unistd.h>

namespace {

using crowdtrain::engine::PrepareProgress;

std::string readStdin()
{
    return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

std::string withCommas(uint64_t value)
{
    std::string digits = std::to_string(value);
    for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3)
        digits.insert(static_cast<std::size_t>(i), ",");
    return digits;
}

// A bar redrawn in place on a terminal; on a pipe or file, a line every
// tenth of the way, so logs stay short.
class ProgressReporter {
public:
    ProgressReporter()
        : m_tty(::isatty(STDERR_FILENO) == 1)
    { }

    void operator()(const PrepareProgress& p)
    {
        const auto now = std::chrono::steady_clock::now();
        const double fraction = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1.0;
        const bool newStage = p.stage != m_stage;
        if (newStage) {
            finishLine();
            m_stage = p.stage;
            m_lastTenth = -1;
        }
        if (m_tty) {
            if (!newStage && p.done != p.total && now - m_lastDraw < std::chrono::milliseconds(100))
                return;
            m_lastDraw = now;
            const int width = 30;
            const int filled = static_cast<int>(fraction * width);
            std::fprintf(stderr, "\r%-10s [%s%s] %3d%%", p.stage.c_str(), std::string(filled, '#').c_str(),
                std::string(width - filled, ' ').c_str(), static_cast<int>(fraction * 100));
            m_open = true;
        } else {
            const int tenth = static_cast<int>(fraction * 10);
            if (tenth == m_lastTenth)
                return;
            m_lastTenth = tenth;
            std::fprintf(stderr, "%s: %d%%\n", p.stage.c_str(), tenth * 10);
        }
    }

    void finishLine()
    {
        if (m_open)
            std::fputc('\n', stderr);
        m_open = false;
    }

private:
    bool m_tty;
    bool m_open = false;
    std::string m_stage;
    int m_lastTenth = -1;
    std::chrono::steady_clock::time_point m_lastDraw;
};

int tokenizeStdin(const std::string& dir, bool reverse)
{
    auto tokenizer = crowdtrain::engine::loadTokenizer(dir);
    if (!tokenizer) {
        std::cerr << "crowdtrain-prepare: " << tokenizer.error().message << '\n';
        return 1;
    }
    const std::string input = readStdin();
    if (!reverse) {
        auto ids = (*tokenizer)->tryEncode(input);
        if (!ids) {
            std::cerr << "crowdtrain-prepare: standard input: " << ids.error().message << '\n';
            return 1;
        }
        std::string line;
        for (const int32_t id : *ids)
            line += (line.empty() ? "" : " ") + std::to_string(id);
        std::cout << line << '\n';
        return 0;
    }
    std::vector<int32_t> ids;
    std::istringstream words(input);
    std::string word;
    while (words >> word) {
        std::size_t used = 0;
        long long id = -1;
        try {
            id = std::stoll(word, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != word.size() || id < 0 || id >= (*tokenizer)->vocabSize()) {
            std::cerr << "crowdtrain-prepare: '" << word << "' is not a token id (0.." << (*tokenizer)->vocabSize() - 1
                      << ")\n";
            return 1;
        }
        ids.push_back(static_cast<int32_t>(id));
    }
    std::cout << (*tokenizer)->decode(ids);
    return 0;
}

// A project slug ([a-z0-9-]{1,64}) from a spec file's name.
std::string slugOf(const std::filesystem::path& specFile)
{
    std::string stem = specFile.filename().string();
    for (const char* suffix : {".json", ".project"})
        if (stem.ends_with(suffix))
            stem.resize(stem.size() - std::string_view(suffix).size());
    std::string slug;
    for (char c : stem) {
        const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (std::isalnum(static_cast<unsigned char>(lower)) && static_cast<unsigned char>(lower) < 0x80)
            slug += lower;
        else if (!slug.empty() && slug.back() != '-')
            slug += '-';
    }
    while (!slug.empty() && slug.back() == '-')
        slug.pop_back();
    slug.resize(std::min<std::size_t>(slug.size(), 64));
    return slug.empty() ? "project" : slug;
}

// A project spec for the prepared data (docs/examples/README.md): the
// vocabulary from the tokenizer, a small model that trains on a laptop,
// every other field at its default. The host edits it before launching.
bool writeSpec(const std::filesystem::path& specFile, const std::filesystem::path& dataDir, int32_t vocabSize)
{
    std::error_code ec;
    const auto specDir = std::filesystem::absolute(specFile, ec).parent_path();
    auto data = std::filesystem::relative(std::filesystem::absolute(dataDir, ec), specDir, ec);
    if (ec || data.empty())
        data = std::filesystem::absolute(dataDir, ec);
    const nlohmann::json spec = {{"name", slugOf(specFile)}, {"description", ""},
        {"model", {{"n_layer", 6}, {"n_head", 6}, {"n_embd", 384}, {"block_size", 256}, {"vocab_size", vocabSize}}},
        {"data", data.string()}, {"checkpoints", {{"every_rounds", 10}, {"keep_last", 5}}}, {"token_goal", 0},
        {"license", ""}, {"checkpoint_access", "everyone"}, {"prompts", nlohmann::json::array()}};
    const auto temporary = specFile.string() + ".tmp";
    {
        std::ofstream out(temporary);
        out << spec.dump(2) << '\n';
        if (!out)
            return false;
    }
    std::filesystem::rename(temporary, specFile, ec);
    return !ec;
}

} // namespace

int main(int argc, char** argv)
{
    using crowdtrain::app::Args;
    Args args("crowdtrain-prepare", "turn a text corpus into a tokenizer and token shards",
        "  crowdtrain-prepare INPUT... --out DIR [options]   prepare a data folder from text files or\n"
        "                                                  folders (every text file in them; hidden files\n"
        "                                                  and folders, and binary files, are skipped)\n"
        "  crowdtrain-prepare tokenize --tokenizer-dir DIR   print the token ids of standard input\n"
        "  crowdtrain-prepare detokenize --tokenizer-dir DIR print the text of the ids on standard input\n"
        "\n"
        "The output folder gets tokenizer/, NAME_train_NNNNNN.bin and NAME_val_NNNNNN.bin (llm.c's\n"
        "shard format; validation is the last fraction of the token stream) and meta.json. With\n"
        "gpt2, <|endoftext|> separates input files.");
    args.option("out", "output data folder (new, or empty)");
    args.option("tokenizer", "gpt2 or char (vocabulary built from the corpus)", "gpt2");
    args.option("gpt2-dir", "folder with GPT-2's encoder.json and vocab.bpe (for --tokenizer gpt2)");
    args.numberOption("val-fraction", "share of the tokens kept for validation", "0.1");
    args.integerOption("shard-tokens", "at most this many tokens per shard", "100000000");
    args.option("name", "shard file name prefix (default: the first input's name)");
    args.option("tokenizer-dir", "tokenizer folder, for tokenize/detokenize");
    args.option("spec",
        "also write a project spec FILE for crowdtrain-server: its name from the file's, the\n"
        "vocabulary from the data, a small model, the rest at defaults (a new file)");
    if (auto exitCode = args.parse(crowdtrain::app::argumentsOf(argc, argv)))
        return *exitCode;

    const auto& positionals = args.positionals();
    if (!positionals.empty() && (positionals[0] == "tokenize" || positionals[0] == "detokenize")) {
        if (!args.has("tokenizer-dir") || positionals.size() > 1) {
            std::cerr << "crowdtrain-prepare: usage: crowdtrain-prepare " << positionals[0] << " --tokenizer-dir DIR\n";
            return 2;
        }
        return tokenizeStdin(args.value("tokenizer-dir"), positionals[0] == "detokenize");
    }

    crowdtrain::engine::PrepareOptions options;
    try {
        options.valFraction = args.number("val-fraction");
        const long long shardTokens = args.integer("shard-tokens");
        options.shardTokens = shardTokens > 0 ? static_cast<uint64_t>(shardTokens) : 0;
    } catch (const std::exception& e) {
        std::cerr << "crowdtrain-prepare: " << e.what() << '\n';
        return 2;
    }
    if (positionals.empty() || !args.has("out")) {
        std::cerr << "crowdtrain-prepare: give input files or folders and --out DIR (see --help)\n";
        return 2;
    }
    options.inputs.assign(positionals.begin(), positionals.end());
    options.outDir = args.value("out");
    options.tokenizer = args.value("tokenizer");
    options.gpt2Dir = args.value("gpt2-dir");
    options.name = args.value("name");
    const std::filesystem::path specFile = args.has("spec") ? args.value("spec") : std::string();
    if (!specFile.empty() && std::filesystem::exists(specFile)) {
        std::cerr << "crowdtrain-prepare: --spec " << specFile.string() << ": exists; give a new file\n";
        return 2;
    }

    ProgressReporter reporter;
    auto summary = crowdtrain::engine::prepareDataSet(options, [&](const PrepareProgress& p) { reporter(p); });
    reporter.finishLine();
    if (!summary) {
        std::cerr << "crowdtrain-prepare: " << summary.error().message << '\n';
        return 1;
    }
    const auto& s = *summary;
    std::cout << "prepared " << options.outDir.string() << '\n'
              << "  input:     " << withCommas(s.inputBytes) << " bytes in " << s.inputFiles << " file"
              << (s.inputFiles == 1 ? "" : "s") << '\n'
              << "  tokenizer: " << s.tokenizerKind << ", vocabulary " << withCommas(static_cast<uint64_t>(s.vocabSize))
              << '\n'
              << "  tokens:    " << withCommas(s.trainTokens + s.valTokens) << " (train " << withCommas(s.trainTokens)
              << ", val " << withCommas(s.valTokens) << ")\n"
              << "  shards:    " << s.trainShards.size() << " train, " << s.valShards.size() << " val\n";
    if (!specFile.empty()) {
        if (!writeSpec(specFile, options.outDir, s.vocabSize)) {
            std::cerr << "crowdtrain-prepare: cannot write " << specFile.string() << '\n';
            return 1;
        }
        std::cout << "  spec:      " << specFile.string() << " (edit it, then: crowdtrain-server " << specFile.string()
                  << " --http 127.0.0.1:8080)\n";
    }
    return 0;
}
