// One vocabulary (issue 43 item 9): every enum the wire speaks has one table
// of words, each table reads back what it writes, docs/protocol.md lists
// exactly the table's words, and no error code is spelled in two headers.
#include "net/control/control_names.h"
#include "net/volunteer/agent_phase.h"
#include "net/wire/error_codes.h"

#include <QFile>
#include <QRegularExpression>
#include <QSet>
#include <QTest>

using namespace crowdtrain;

namespace {

QString sourceFile(const QString& relative)
{
    QFile file(QStringLiteral(CROWDTRAIN_SOURCE_DIR "/") + relative);
    if (!file.open(QIODevice::ReadOnly))
        return {};
    return QString::fromUtf8(file.readAll());
}

QStringList backticked(const QString& text)
{
    static const QRegularExpression word(QStringLiteral("`([^`]+)`"));
    QStringList words;
    for (const auto& match : word.globalMatch(text))
        words << match.captured(1);
    return words;
}

// The backticked words of the line after the one that starts with `marker`.
QStringList listAfter(const QString& docs, const QString& marker)
{
    const QStringList lines = docs.split(QLatin1Char('\n'));
    for (qsizetype i = 0; i + 1 < lines.size(); ++i)
        if (lines[i].startsWith(marker))
            return backticked(lines[i + 1]);
    return {};
}

// The backticked words of the first column of the table under `header`.
QStringList tableColumn(const QString& docs, const QString& header)
{
    const QStringList lines = docs.split(QLatin1Char('\n'));
    QStringList words;
    const qsizetype at = lines.indexOf(header);
    if (at < 0)
        return words;
    for (qsizetype i = at + 2; i < lines.size() && lines[i].startsWith(QLatin1Char('|')); ++i)
        words << backticked(lines[i].section(QLatin1Char('|'), 1, 1));
    return words;
}

template <typename E, std::size_t N> QStringList wordsOf(const core::NameTable<E, N>& table)
{
    QStringList words;
    for (const auto& [value, name] : table)
        if (!name.empty()) // LimitCode::None
            words << QString::fromLatin1(name.data(), qsizetype(name.size()));
    return words;
}

// Every value's word parses back to the value, and no word is empty but None's.
template <typename E, std::size_t N, typename Name, typename Parse>
void roundTrip(const core::NameTable<E, N>& table, Name name, Parse parse)
{
    for (const auto& [value, word] : table) {
        QCOMPARE(name(value), word);
        const std::optional<E> back = parse(word);
        QVERIFY2(back && *back == value, word.data());
    }
    QVERIFY(!parse("no such word"));
}

} // namespace

class TestVocabulary : public QObject {
    Q_OBJECT

private slots:
    void tablesRoundTrip()
    {
        roundTrip(
            control::kDaemonStateNames, [](auto v) { return control::wireName(v); }, control::parseDaemonState);
        roundTrip(
            control::kLimitCodeNames, [](auto v) { return control::wireName(v); }, control::parseLimitCode);
        roundTrip(
            control::kDownloadStateNames, [](auto v) { return control::wireName(v); }, control::parseDownloadState);
        roundTrip(
            volunteer::kAgentPhaseNames, [](auto v) { return volunteer::wireName(v); }, volunteer::parseAgentPhase);
    }

    void theDocsListEachTable_data()
    {
        QTest::addColumn<QStringList>("documented");
        QTest::addColumn<QStringList>("table");
        const QString docs = sourceFile(QStringLiteral("docs/protocol.md"));
        QVERIFY(!docs.isEmpty());
        QTest::newRow("download states") << listAfter(docs, QStringLiteral("Every download state"))
                                         << wordsOf(control::kDownloadStateNames);
        QTest::newRow("limit codes") << listAfter(docs, QStringLiteral("Every limit code"))
                                     << wordsOf(control::kLimitCodeNames);
        QTest::newRow("agent phases") << listAfter(docs, QStringLiteral("Every agent phase"))
                                      << wordsOf(volunteer::kAgentPhaseNames);
        QTest::newRow("daemon states") << tableColumn(docs, QStringLiteral("| state | reason |"))
                                       << wordsOf(control::kDaemonStateNames);
        QStringList protocolCodes;
        for (const net::ErrorCodeInfo& info : net::kErrorCodes)
            if (info.protocol)
                protocolCodes << QString::fromLatin1(info.code.data(), qsizetype(info.code.size()));
        QTest::newRow("protocol error codes")
            << tableColumn(docs, QStringLiteral("| code | when (this is every code the coordinator sends) |"))
            << protocolCodes;
    }

    void theDocsListEachTable()
    {
        QFETCH(QStringList, documented);
        QFETCH(QStringList, table);
        QVERIFY2(!documented.isEmpty(), "the docs' list was not found");
        documented.sort();
        table.sort();
        QCOMPARE(documented, table);
    }

    // Each error word is spelled once: the other headers name it through
    // the one that has it (core/, engine/, net/wire, the control API).
    void eachErrorCodeIsSpelledOnce()
    {
        static const QRegularExpression block(
            QStringLiteral("namespace [a-z:]*errc \\{(.*?)\\n\\}"), QRegularExpression::DotMatchesEverythingOption);
        static const QRegularExpression spelled(QStringLiteral("std::string_view (k\\w+) = \"([a-z_]+)\""));
        QHash<QString, QString> where;
        QStringList twice;
        for (const QString& header : {QStringLiteral("core/error_codes.h"), QStringLiteral("engine/error_codes.h"),
                 QStringLiteral("net/wire/error_codes.h"), QStringLiteral("net/control/control_names.h"),
                 QStringLiteral("net/control/control_protocol.h")}) {
            const QString text = sourceFile(header);
            QVERIFY2(!text.isEmpty(), qPrintable(header));
            for (const auto& b : block.globalMatch(text))
                for (const auto& m : spelled.globalMatch(b.captured(1))) {
                    const QString word = m.captured(2);
                    if (where.contains(word))
                        twice << word + QStringLiteral(" in ") + where[word] + QStringLiteral(" and ") + header;
                    where.insert(word, header);
                }
        }
        QVERIFY2(where.size() > 50, "the headers' codes were not found");
        QVERIFY2(twice.isEmpty(), qPrintable(twice.join(QStringLiteral("; "))));
    }

    // The app and the command-line client name error codes by their
    // constants, never by a string of their own.
    void theClientsWriteNoErrorWord()
    {
        static const QRegularExpression raw(
            QStringLiteral("(QStringLiteral\\(|QLatin1String\\(|code == )\"(no_daemon|busy|malformed|not_joined|"
                           "not_found|timeout|internal|bad_request|already_running)\""));
        for (const QString& file : {QStringLiteral("ui/daemon_link.cpp"), QStringLiteral("app/worker_main.cpp")}) {
            const QString text = sourceFile(file);
            QVERIFY2(!text.isEmpty(), qPrintable(file));
            const auto match = raw.match(text);
            QVERIFY2(!match.hasMatch(), qPrintable(file + QStringLiteral(": ") + match.captured(0)));
        }
    }
};

QTEST_GUILESS_MAIN(TestVocabulary)
#include "tst_vocabulary.moc"
