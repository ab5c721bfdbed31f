// Writes multilingual_fixture.json (documents: hand-written edge cases, glibc locale strings in
// ~350 languages, King James Bible excerpts) and multilingual_ids.json.gz (the ids of every
// document from the reference encoders: js-tiktoken for r50k/cl100k/o200k, the JavaScript port of
// Hugging Face tokenizers for the Llama 3 and Qwen 3 tokenizer.json files).
// Run through make_multilingual_fixture.sh. Usage:
//   node make_multilingual_fixture.cjs NODE_DIR TOKENIZER_DIR OUT_DIR
"use strict";
const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const { execFileSync } = require("child_process");

const [nodeDir, tokDir, outDir] = process.argv.slice(2);
const mods = path.join(nodeDir, "node_modules");
const { getEncoding } = require(path.join(mods, "js-tiktoken"));

// ---- hand-written edge cases (no NEL/BOM: JavaScript's \s differs from Unicode White_Space
// there; no special-token strings: Hugging Face encoders would turn them into special ids) ----
const rep = (s, n) => s.repeat(n);
const cases = [
  ["contractions", "I'm you're he's we've they'll I'd can't don't"],
  ["contractions in capitals", "THEY'RE 'S'T 'Re ''ll rock'n'roll '''' x's's DON'T I'M WE'VE"],
  ["apostrophes alone", " 's ' 'd' ' '\n'll"],
  ["camel and upper runs", "camelCaseWord HTTPServer XMLHttpRequest iPhone ABCdef abcDEF HELLO's"],
  ["titlecase and modifier letters", "ǅemal ʰaspirated ˈstress ǈubljana ǋ"],
  ["combining marks (NFD)", "cafe\u0301 nai\u0308ve A\u030a \u0301x e\u0301\u0302"],
  ["precomposed (NFC)", "café naïve Å"],
  ["german", "Grüße aus Köln, schöne Straße! Übermäßig"],
  ["greek", "Ελληνικά γράμματα και αριθμοί ΑΒΓ"],
  ["russian", "Привет, мир! Как дела? ПРИВЕТ мир"],
  ["chinese", "中文字符和标点。今天天气很好！你好，世界"],
  ["japanese", "日本語のテキスト、カタカナとひらがな。ｶﾀｶﾅ"],
  ["korean", "한국어 텍스트입니다. 안녕하세요"],
  ["arabic", "العربية نص مع ٣٤٥ أرقام، وعلامات َ ُ ِ"],
  ["hebrew", "עברית עם ניקוד: שָׁלוֹם"],
  ["devanagari", "हिन्दी में पाठ १२३ नमस्ते"],
  ["thai", "ภาษาไทยง่ายนิดเดียว ๑๒๓"],
  ["numbers", "123 4567 89012345 3.14159, 1e-10, -42 2024-01-01T12:00:00Z 1234567890123"],
  ["other numbers", "½ ¾ x² y³ Ⅻ ① １２３４ ⁴ ٠١٢٣٤٥"],
  ["emoji", "👍🏽 👨‍👩‍👧‍👦 🇺🇸 😀😃😄 ❤️ emoji🚀inside"],
  ["slashes", "a/b//c path/to/file.txt\n/ //\n\r\n/ http://x.org/a/b?c=d&e=f"],
  ["punctuation runs", "...!!! ??? --- === (a) [b] {c} <d> \"e\" #f @g $h %i ^j &k *l"],
  ["punctuation then newlines", "end.\n\nNext!\r\n\r\n?\n x;\n\n\n"],
  ["trailing spaces", "trailing spaces   "],
  ["leading newlines", "\n\n\nleading newlines"],
  ["tabs", "a\tb\t\tc\t\n\td"],
  ["crlf", "line1\r\nline2\r\n\r\nline3"],
  ["space runs", "  two leading, word  \n  next    four\n\n    indented"],
  ["only spaces", "   "],
  ["newline only", "\n"],
  ["nbsp and ideographic space", "x \u00a0y a\u3000b \u2003em \u00a0\u00a0z"],
  ["line and paragraph separators", "mixed \u2028 line sep\u2029para"],
  ["vt ff", "\u000b\u000c vertical tab, form feed \u000b"],
  ["control characters", "\u0001\u0002 ctl \u001c\u001d\u007f"],
  ["code", "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n"],
  ["json", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}"],
  ["long letter run", rep("abc", 100)],
  ["long digit run", rep("0123456789", 30)],
  ["long space run", "x" + rep(" ", 300) + "y"],
  ["long newline run", "x" + rep("\n", 150) + "y" + rep("\r\n", 80)],
  ["long punctuation run", rep("=-", 120) + "/" + rep("*", 99)],
  ["long CJK run", rep("漢字かな交じり文", 20)],
  ["long mixed word", rep("Supercalifragilistic", 10)],
  ["repeated pieces", rep("the cat sat on the mat. ", 20)],
];

// ---- glibc locale data: the quoted strings of every locale file, <Uxxxx> decoded ----
const locDir = "/usr/share/i18n/locales";
const locales = [];
for (const f of fs.readdirSync(locDir).sort()) {
  const t = fs.readFileSync(path.join(locDir, f), "latin1");
  const words = [];
  for (const m of t.matchAll(/"([^"\n]*)"/g)) {
    const s = m[1].replace(/<U([0-9A-Fa-f]{4,6})>/g, (_, h) => String.fromCodePoint(parseInt(h, 16)));
    if (!/[<%\\\x00-\x1f]/.test(s) && s.trim()) words.push(s);
  }
  const chars = Array.from(f + ": " + words.join(" "));  // at most 240 bytes, whole characters
  while (Buffer.byteLength(chars.join("")) > 240) chars.pop();
  const doc = chars.join("");
  if (words.length) locales.push(["locale " + f, doc]);
}

// ---- King James Bible (public domain), from Debian's bible-kjv ----
const verses = ["Genesis 1:1-31", "Psalms 23:1-6", "Ecclesiastes 3:1-15", "John 1:1-14"];
const bible = verses.map((v) => ["kjv " + v, execFileSync("bible", ["-f", v], { encoding: "utf8" })]);

const documents = [...cases, ...locales, ...bible].map(([name, text]) => ({ name, text }));

// ---- reference ids ----
const ids = {};
for (const name of ["r50k_base", "cl100k_base", "o200k_base"]) {
  const enc = getEncoding(name);
  ids[name] = documents.map((d) => enc.encode(d.text, [], []));
}
const hfLib = path.join(mods, "@huggingface", "tokenizers", "dist", "tokenizers.cjs");
const { Tokenizer } = require(hfLib);
for (const name of ["llama3", "qwen3"]) {
  const tj = JSON.parse(fs.readFileSync(path.join(tokDir, name, "tokenizer.json"), "utf8"));
  for (const t of tj.added_tokens)
    for (const d of documents)
      if (d.text.includes(t.content)) throw new Error(`${d.name} holds the added token ${t.content}`);
  const tok = new Tokenizer(tj, {});
  ids[name] = documents.map((d) => tok.encode(d.text, { add_special_tokens: false }).ids);
}

const versions = {};
for (const p of ["js-tiktoken", "@huggingface/tokenizers"])
  versions[p] = JSON.parse(fs.readFileSync(path.join(mods, p, "package.json"), "utf8")).version;
fs.writeFileSync(path.join(outDir, "multilingual_fixture.json"),
                 JSON.stringify({ documents }, null, 0).replace(/\},\{/g, "},\n{") + "\n");
const idsJson = JSON.stringify({ reference: versions, ids }).replace(/\],\[/g, "],\n[");
fs.writeFileSync(path.join(outDir, "multilingual_ids.json.gz"), zlib.gzipSync(idsJson, { level: 9 }));
const bytes = documents.reduce((n, d) => n + Buffer.byteLength(d.text), 0);
console.log(`${documents.length} documents, ${bytes} bytes; ids: ` +
            Object.entries(ids).map(([k, v]) => `${k} ${v.flat().length}`).join(", "));
