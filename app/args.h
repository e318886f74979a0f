#pragma once

// A small command-line parser for the non-GUI programs (which do not link Qt):
// `--name value`, `--name=value`, boolean `--flag`, positionals, and the
// standard --help / --version. Generates the help text from the declarations.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace crowdtrain::app {

class Args {
public:
    Args(std::string program, std::string summary, std::string usage);

    // Declares `--name VALUE` with a default shown in --help.
    void option(const std::string& name, const std::string& help, const std::string& defaultValue = {});
    // Declares a boolean `--name`.
    void flag(const std::string& name, const std::string& help);

    // Parses argv (without argv[0]). On --help/--version prints to stdout and
    // returns 0; on a bad argument prints to stderr and returns 2; otherwise
    // returns nullopt and the values can be read.
    std::optional<int> parse(const std::vector<std::string>& arguments);

    std::string value(const std::string& name) const;
    bool has(const std::string& name) const; // given on the command line
    bool isSet(const std::string& name) const; // a flag that was given
    long long integer(const std::string& name) const;
    double number(const std::string& name) const;
    const std::vector<std::string>& positionals() const { return m_positionals; }

    std::string helpText() const;

private:
    struct Option {
        std::string help;
        std::string defaultValue;
        bool isFlag = false;
    };

    std::string m_program;
    std::string m_summary;
    std::string m_usage;
    std::vector<std::string> m_order;
    std::map<std::string, Option> m_options;
    std::map<std::string, std::string> m_values;
    std::vector<std::string> m_positionals;
};

// argv[1..argc) as strings.
std::vector<std::string> argumentsOf(int argc, char** argv);

} // namespace crowdtrain::app
