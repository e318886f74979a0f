#include "app/args.h"

#include "crowdtrain/version.h"

#include <iostream>
#include <stdexcept>

namespace crowdtrain::app {

Args::Args(std::string program, std::string summary, std::string usage)
    : m_program(std::move(program))
    , m_summary(std::move(summary))
    , m_usage(std::move(usage))
{ }

void Args::option(const std::string& name, const std::string& help, const std::string& defaultValue)
{
    m_order.push_back(name);
    m_options[name] = Option{help, defaultValue, false};
}

void Args::flag(const std::string& name, const std::string& help)
{
    m_order.push_back(name);
    m_options[name] = Option{help, {}, true};
}

std::optional<int> Args::parse(const std::vector<std::string>& arguments)
{
    for (std::size_t i = 0; i < arguments.size(); ++i) {
        const std::string& arg = arguments[i];
        if (arg == "--help" || arg == "-h") {
            std::cout << helpText();
            return 0;
        }
        if (arg == "--version") {
            std::cout << m_program << ' ' << kVersion << '\n';
            return 0;
        }
        if (arg == "--") {
            m_positionals.insert(m_positionals.end(), arguments.begin() + static_cast<long>(i) + 1, arguments.end());
            break;
        }
        if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
            m_positionals.push_back(arg);
            continue;
        }
        std::string name = arg.substr(2);
        std::optional<std::string> inlineValue;
        if (const auto eq = name.find('='); eq != std::string::npos) {
            inlineValue = name.substr(eq + 1);
            name.resize(eq);
        }
        const auto it = m_options.find(name);
        if (it == m_options.end()) {
            std::cerr << m_program << ": unknown option --" << name << " (see --help)\n";
            return 2;
        }
        if (it->second.isFlag) {
            if (inlineValue) {
                std::cerr << m_program << ": --" << name << " takes no value\n";
                return 2;
            }
            m_values[name] = "1";
            continue;
        }
        if (inlineValue) {
            m_values[name] = *inlineValue;
        } else if (i + 1 < arguments.size()) {
            m_values[name] = arguments[++i];
        } else {
            std::cerr << m_program << ": --" << name << " needs a value\n";
            return 2;
        }
    }
    return std::nullopt;
}

std::string Args::value(const std::string& name) const
{
    if (const auto it = m_values.find(name); it != m_values.end())
        return it->second;
    if (const auto it = m_options.find(name); it != m_options.end())
        return it->second.defaultValue;
    throw std::logic_error("undeclared option --" + name);
}

bool Args::has(const std::string& name) const
{
    return m_values.count(name) != 0;
}

bool Args::isSet(const std::string& name) const
{
    return has(name);
}

long long Args::integer(const std::string& name) const
{
    const std::string text = value(name);
    std::size_t used = 0;
    long long result = 0;
    try {
        result = std::stoll(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size())
        throw std::invalid_argument("--" + name + " expects an integer, got '" + text + "'");
    return result;
}

double Args::number(const std::string& name) const
{
    const std::string text = value(name);
    std::size_t used = 0;
    double result = 0;
    try {
        result = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != text.size())
        throw std::invalid_argument("--" + name + " expects a number, got '" + text + "'");
    return result;
}

std::string Args::helpText() const
{
    std::string text = m_program + " " + kVersion + " - " + m_summary + "\n\nUsage:\n" + m_usage + "\n\nOptions:\n";
    auto line = [&](const std::string& left, const std::string& help) {
        std::string padded = "  " + left;
        if (padded.size() < 30)
            padded.resize(30, ' ');
        else
            padded += "\n" + std::string(30, ' ');
        text += padded + help + "\n";
    };
    for (const auto& name : m_order) {
        const Option& option = m_options.at(name);
        std::string help = option.help;
        if (!option.isFlag && !option.defaultValue.empty())
            help += " (default " + option.defaultValue + ")";
        line("--" + name + (option.isFlag ? "" : " VALUE"), help);
    }
    line("--help", "show this help and exit");
    line("--version", "show the version and exit");
    return text;
}

std::vector<std::string> argumentsOf(int argc, char** argv)
{
    return std::vector<std::string>(argv + 1, argv + argc);
}

} // namespace crowdtrain::app
