// The openai JS SDK's realtime client (OpenAIRealtimeWS, Node) against LiveServe: a spoken turn (semantic_vad),
// a text turn and a barge-in.
//
//   node examples/js/turns.mjs ws://127.0.0.1:8000/v1/realtime [API_KEY]
//
// Prints one JSON object: each turn's response status, the server events seen, every error.
import fs from 'node:fs';
import net from 'node:net';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const CLIPS = new URL('../../lab/clips/', import.meta.url);
const CHUNK_BYTES = 24000 * 0.02 * 2; // 20 ms of 24 kHz mono PCM16
const TIMEOUT_MS = 90000;

/** A shipped clip's PCM16 samples (the WAV's data chunk). */
function clip(name) {
  const wav = fs.readFileSync(new URL(name, CLIPS));
  for (let at = 12; at < wav.length; at += 8 + wav.readUInt32LE(at + 4)) {
    if (wav.toString('ascii', at, at + 4) === 'data') return wav.subarray(at + 8, at + 8 + wav.readUInt32LE(at + 4));
  }
  throw new Error(`${name}: no data chunk`);
}

/** Every 20 ms, the next chunk of queued speech, else silence: what a live microphone sends. */
function microphone(rt) {
  let queued = Buffer.alloc(0);
  const timer = setInterval(() => {
    const chunk = Buffer.alloc(CHUNK_BYTES);
    queued.copy(chunk, 0, 0, Math.min(CHUNK_BYTES, queued.length));
    queued = queued.subarray(Math.min(CHUNK_BYTES, queued.length));
    rt.send({ type: 'input_audio_buffer.append', audio: chunk.toString('base64') });
  }, 20);
  return {
    say: (name) => { queued = Buffer.concat([queued, clip(name)]); },
    speaking: () => queued.length > 0,
    stop: () => clearInterval(timer),
  };
}

/** The next server event of `type` (and, optionally, passing `test`). */
function next(rt, type, test = () => true) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${type} within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    const listener = (event) => {
      if (!test(event)) return;
      clearTimeout(timer);
      rt.off(type, listener);
      resolve(event);
    };
    rt.on(type, listener);
  });
}

/** The first reply to end uncut once the microphone has said everything queued: semantic_vad may end a turn at a
 * pause inside the words, and the words after the pause then cut the reply it started. */
async function answerToLastWords(rt, mic) {
  while (mic.speaking()) await new Promise((resolve) => setTimeout(resolve, 20));
  return next(rt, 'response.done', (event) => event.response.status !== 'cancelled');
}

async function turns(url, apiKey) {
  const target = new URL(url);
  const client = new OpenAI({ apiKey, baseURL: `http://${target.host}/v1` });
  // The SDK always dials wss://. LiveServe listens on plain ws:// (TLS is left to a reverse proxy); to reach it
  // directly, give the `ws` socket a plain TCP connection for that URL.
  const plainTcp = (options) => net.connect({ host: options.host, port: options.port });
  const rt = new OpenAIRealtimeWS({ model: 'tiny-omni', options: { createConnection: plainTcp } }, client);
  const seen = {};
  const errors = [];
  rt.on('event', (event) => { seen[event.type] = (seen[event.type] ?? 0) + 1; });
  rt.on('error', (error) => errors.push(error.error ?? { message: error.message }));
  await next(rt, 'session.created');
  rt.send({ type: 'session.update', session: { type: 'realtime', audio: { input: { turn_detection: { type: 'semantic_vad' } } } } });
  await next(rt, 'session.updated');
  const mic = microphone(rt);
  const result = {};
  mic.say('q_capital_espeak_24k.wav'); // semantic_vad ends the turn; the server answers
  result.spoken = (await next(rt, 'response.done')).response.status;
  rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hello.' }] } });
  rt.send({ type: 'response.create' });
  result.text = (await next(rt, 'response.done')).response.status;
  mic.say('q_story_espeak_24k.wav');
  const playing = await next(rt, 'response.output_audio.delta'); // the reply is playing: speak over it
  const truncated = next(rt, 'conversation.item.truncated', (event) => event.item_id === playing.item_id);
  mic.say('q_spider_espeak_24k.wav');
  const cut = await next(rt, 'response.done');
  const answer = await answerToLastWords(rt, mic);
  result.barge_in = { reply: cut.response.status, reply_cut_at_ms: (await truncated).audio_end_ms, answer: answer.response.status };
  mic.stop();
  rt.close();
  return { turns: result, server_events: seen, errors };
}

const [url, apiKey = 'unused'] = process.argv.slice(2);
console.log(JSON.stringify(await turns(url, apiKey)));
