#pragma once

// The command line of the non-GUI programs, parsed by CLI11 (Debian's
// libcli11-dev): `--name value`, `--name=value`, boolean `--flag`,
// positionals, and the standard --help / --version, with the help text made
// from the declarations. Options are checked whole at parse(): an unknown
// option, a missing value or a number that is not one is a message and exit
// status 2, so nothing after parse() throws.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace crowdtrain::app {

class Args {
public:
    Args(std::string program, std::string summary, std::string usage);
    ~Args();

    // Declares `--name VALUE` (text) with a default shown in --help.
    void option(const std::string& name, const std::string& help, const std::string& defaultValue = {});
    // The same for a whole number, or any number; checked at parse().
    void integerOption(const std::string& name, const std::string& help, const std::string& defaultValue = {});
    void numberOption(const std::string& name, const std::string& help, const std::string& defaultValue = {});
    // Declares a boolean `--name`.
    void flag(const std::string& name, const std::string& help);

    // Parses argv (without argv[0]). On --help/--version prints to stdout and
    // returns 0; on a bad argument prints to stderr and returns 2; otherwise
    // returns nullopt and the values can be read.
    std::optional<int> parse(const std::vector<std::string>& arguments);

    std::string value(const std::string& name) const;
    bool has(const std::string& name) const; // given on the command line
    bool isSet(const std::string& name) const; // a flag that was given
    long long integer(const std::string& name) const; // an integerOption
    double number(const std::string& name) const; // a numberOption (or integerOption)
    const std::vector<std::string>& positionals() const { return m_positionals; }
    // `--name value` for each of `names` given on the command line, to pass on.
    std::vector<std::string> given(const std::vector<std::string>& names) const;

private:
    void declare(const std::string& name, const std::string& help, const std::string& defaultValue, int kind);

    std::string m_program;
    std::unique_ptr<CLI::App> m_app;
    std::map<std::string, std::string> m_defaults;
    std::map<std::string, std::string> m_values; // given
    std::map<std::string, bool> m_flags;
    std::vector<std::string> m_positionals;
};

// argv[1..argc) as strings.
std::vector<std::string> argumentsOf(int argc, char** argv);

} // namespace crowdtrain::app
