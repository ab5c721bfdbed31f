// Drives loom serve with the official OpenAI Node.js client (the npm package openai) and prints
// one JSON line per check for test_serve_cli.sh to compare with curl's answers.
// usage: node openai_client.js CLIENT_DIR BASE_URL MODEL
'use strict';
const [clientDir, baseURL, model] = process.argv.slice(2);
const OpenAI = require(clientDir);

async function main() {
  const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const models = await client.models.list();
  console.log(JSON.stringify({ check: 'models', ids: models.data.map((m) => m.id) }));
  const whole = await client.completions.create({
    model, prompt: 'The licenses', max_tokens: 24, temperature: 0, logprobs: 0,
  });
  console.log(JSON.stringify({
    check: 'whole', text: whole.choices[0].text, finish: whole.choices[0].finish_reason,
    logprobs: whole.choices[0].logprobs.token_logprobs, usage: whole.usage,
  }));
  const stream = await client.completions.create({
    model, prompt: 'The licenses', max_tokens: 24, temperature: 0, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  console.log(JSON.stringify({ check: 'stream', text, finish }));
  try {
    await client.completions.create({ model, prompt: 'x', max_tokens: 0 });
    console.log(JSON.stringify({ check: 'bad', status: 200 }));
  } catch (e) {
    console.log(JSON.stringify({
      check: 'bad', status: e.status, type: e.type, param: e.param, message: e.message,
      isBadRequest: e instanceof OpenAI.BadRequestError,
    }));
  }
}

main().catch((e) => {
  console.error(`openai client: ${e.stack || e}`);
  process.exit(1);
});
