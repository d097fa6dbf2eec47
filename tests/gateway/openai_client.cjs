// The official `openai` npm client (package.json, package-lock.json; set up
// by tools/setup.sh into .tools/openai-client) against `mpcache gateway`:
// completions and chat, streaming and not, temperature 0 and > 0 (seeded).
//   node openai_client.cjs BASE_URL MODEL PROMPT MAX_TOKENS
// Prints one JSON object: the texts it got, and the errors it was given.
const OpenAI = require("openai");

async function main() {
  const [baseURL, model, prompt, maxTokens] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: "unused-on-loopback", maxRetries: 0, timeout: 120000 });
  const max_tokens = Number(maxTokens);
  const out = {};

  const c = await client.completions.create({ model, prompt, max_tokens, temperature: 0 });
  out.completion = c.choices[0].text;
  out.completion_finish = c.choices[0].finish_reason;
  out.completion_usage = c.usage;

  let streamed = "";
  let usage = null;
  const s = await client.completions.create({ model, prompt, max_tokens, stream: true,
                                              stream_options: { include_usage: true } });
  for await (const chunk of s) {
    if (chunk.choices.length) streamed += chunk.choices[0].text;
    if (chunk.usage) usage = chunk.usage;
  }
  out.completion_stream = streamed;
  out.completion_stream_usage = usage;

  const messages = [{ role: "user", content: prompt }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens, temperature: 0 });
  out.chat = chat.choices[0].message.content;
  out.chat_role = chat.choices[0].message.role;

  let chatStreamed = "";
  const cs = await client.chat.completions.create({ model, messages, max_tokens, stream: true });
  for await (const chunk of cs) {
    if (chunk.choices.length && chunk.choices[0].delta.content) chatStreamed += chunk.choices[0].delta.content;
  }
  out.chat_stream = chatStreamed;

  // temperature > 0: sampled (Gumbel-max, the noise secret-shared), the same text for the same seed.
  const hot = await client.chat.completions.create({ model, messages, max_tokens, temperature: 1.0, seed: 7 });
  out.hot = hot.choices[0].message.content;
  let hotStreamed = "";
  const hs = await client.chat.completions.create({ model, messages, max_tokens, temperature: 1.0, seed: 7,
                                                    stream: true });
  for await (const chunk of hs) {
    if (chunk.choices.length && chunk.choices[0].delta.content) hotStreamed += chunk.choices[0].delta.content;
  }
  out.hot_again = hotStreamed;
  try {
    await client.completions.create({ model: "no-such-model", prompt, max_tokens });
    out.missing_model = "accepted";
  } catch (e) {
    out.missing_model = { status: e.status, code: e.code ?? (e.error && e.error.code) };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stderr.write("openai_client: " + (e && e.stack ? e.stack : String(e)) + "\n");
  process.exit(1);
});
