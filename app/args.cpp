#include "app/args.h"

#include "crowdtrain/version.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <iostream>
#include <stdexcept>

namespace crowdtrain::app {

namespace {

enum Kind { kText, kInteger, kNumber };

template <typename T> std::optional<T> parsed(const std::string& text)
{
    T value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return value;
}

} // namespace

Args::Args(std::string program, std::string summary, std::string usage)
    : m_program(program)
    , m_app(std::make_unique<CLI::App>(program + " " + kVersion + " - " + summary, program))
{
    m_app->footer("Usage:\n" + usage);
    m_app->set_version_flag("--version", program + " " + kVersion, "show the version and exit");
    m_app->set_help_flag("-h,--help", "show this help and exit");
    m_app->add_option("arguments", m_positionals, "the command and its arguments");
}

Args::~Args() = default;

void Args::declare(const std::string& name, const std::string& help, const std::string& defaultValue, int kind)
{
    m_defaults[name] = defaultValue;
    CLI::Option* option = m_app->add_option("--" + name, m_values[name], help);
    // As before CLI11: an option given twice takes its last value (scripts
    // append overrides to a base command line).
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (!defaultValue.empty())
        option->default_str(defaultValue);
    if (kind == kInteger)
        option->check(CLI::Validator(
            [](std::string& text) { return parsed<long long>(text) ? std::string() : "not a whole number: " + text; },
            "INT"));
    if (kind == kNumber)
        option->check(CLI::Validator(
            [](std::string& text) { return parsed<double>(text) ? std::string() : "not a number: " + text; },
            "NUMBER"));
}

void Args::option(const std::string& name, const std::string& help, const std::string& defaultValue)
{
    declare(name, help, defaultValue, kText);
}

void Args::integerOption(const std::string& name, const std::string& help, const std::string& defaultValue)
{
    declare(name, help, defaultValue, kInteger);
}

void Args::numberOption(const std::string& name, const std::string& help, const std::string& defaultValue)
{
    declare(name, help, defaultValue, kNumber);
}

void Args::flag(const std::string& name, const std::string& help)
{
    m_app->add_flag("--" + name, m_flags[name], help);
}

std::optional<int> Args::parse(const std::vector<std::string>& arguments)
{
    // CLI11 takes the arguments last first.
    std::vector<std::string> reversed(arguments.rbegin(), arguments.rend());
    try {
        m_app->parse(reversed);
    } catch (const CLI::CallForHelp&) {
        std::cout << m_app->help();
        return 0;
    } catch (const CLI::CallForVersion& e) {
        std::cout << e.what() << '\n';
        return 0;
    } catch (const CLI::ParseError& e) {
        std::cerr << m_program << ": " << e.what() << " (see --help)\n";
        return 2;
    }
    return std::nullopt;
}

std::string Args::value(const std::string& name) const
{
    const auto it = m_defaults.find(name);
    if (it == m_defaults.end())
        throw std::logic_error("undeclared option --" + name);
    return has(name) ? m_values.at(name) : it->second;
}

bool Args::has(const std::string& name) const
{
    return m_defaults.contains(name) && m_app->count("--" + name) > 0;
}

bool Args::isSet(const std::string& name) const
{
    const auto it = m_flags.find(name);
    return it != m_flags.end() && it->second;
}

long long Args::integer(const std::string& name) const
{
    if (const auto v = parsed<long long>(value(name)))
        return *v;
    throw std::logic_error("--" + name + " is not declared as an integer option");
}

double Args::number(const std::string& name) const
{
    if (const auto v = parsed<double>(value(name)))
        return *v;
    throw std::logic_error("--" + name + " is not declared as a number option");
}

std::vector<std::string> Args::given(const std::vector<std::string>& names) const
{
    std::vector<std::string> out;
    for (const std::string& name : names)
        if (has(name)) {
            out.push_back("--" + name);
            out.push_back(m_values.at(name));
        }
    return out;
}

std::vector<std::string> argumentsOf(int argc, char** argv)
{
    return std::vector<std::string>(argv + 1, argv + argc);
}

} // namespace crowdtrain::app
