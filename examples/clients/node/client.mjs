#!/usr/bin/env node
// An agentbus client in Node.js on amqplib: nothing but the wire contract (docs/wire.md).
//
//   node client.mjs request <receiver> <action> [parameters-json]   one request, its reply
//   node client.mjs converse <receiver> <action> <parameters-json> <answer-json>...
//                                                  a request whose skill asks: the answers
//   node client.mjs plan <plan.json | ->                            a plan on the leader
//   node client.mjs listen <event-name> [count]                     broadcast events
//   node client.mjs artifact <reference-json> <file>   an artifact's bytes, checked, to a file
//
// Every envelope received is printed on stdout as one JSON line; notes go to stderr.
// Settings: AGENTBUS_URL (amqp://guest:guest@localhost:5672), AGENTBUS_EXCHANGE (agentbus),
// AGENTBUS_TIMEOUT (seconds a request or plan may take, 30; a plan gets ten times that).
// Exit status: 0 on success, 1 on a failure or error reply, 2 on a usage or transport error.

import { createHash, randomUUID } from "node:crypto";
import { createWriteStream, readFileSync } from "node:fs";
import { once } from "node:events";
import amqp from "amqplib";

const URL = process.env.AGENTBUS_URL ?? "amqp://guest:guest@localhost:5672";
const EXCHANGE = process.env.AGENTBUS_EXCHANGE ?? "agentbus";
const TIMEOUT = Number(process.env.AGENTBUS_TIMEOUT ?? 30) * 1000;
// A client picks its own sender id; one per run keeps the replies and events apart.
const SENDER = `node-client-${randomUUID().slice(0, 8)}`;

/** An envelope from this client: version 1.0, or 1.2 to be asked questions (docs/wire.md). */
function envelope(receiver, messageType, payload, version = "1.0") {
  return {
    protocol_version: version,
    message_id: randomUUID(),
    timestamp: new Date().toISOString(),
    sender_id: SENDER,
    receiver_id: receiver,
    message_type: messageType,
    payload,
    metadata: {},
  };
}

/** Print one envelope (or any JSON value) as a line on stdout. */
const print = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

/** Open a channel and an exclusive, server-named queue of our own. */
async function open() {
  const connection = await amqp.connect(URL);
  const channel = await connection.createChannel();
  const { queue } = await channel.assertQueue("", { exclusive: true });
  return { connection, channel, queue };
}

/**
 * Send a request to `agent.<receiver>.request` and resolve with its reply envelope.
 *
 * The reply comes to our own queue (`reply_to`); it is ours when its correlation id is the
 * request's message id. `mandatory` makes the broker return a request nothing is bound for,
 * and `expiration` dead-letters one nobody picked up in time instead of running it late.
 * `onEvent` gets the events sent to `agent.<our sender id>.event` meanwhile (plan progress).
 */
async function request(
  receiver, action, parameters, { timeout = TIMEOUT, onEvent, version = "1.0" } = {},
) {
  const { connection, channel, queue } = await open();
  try {
    if (onEvent) await channel.bindQueue(queue, EXCHANGE, `agent.${SENDER}.event`);
    const sent = envelope(receiver, "request", { action, parameters }, version);
    const reply = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no reply within ${timeout} ms`)), timeout);
      channel.on("return", (message) => {
        clearTimeout(timer);
        reject(new Error(`agent_unavailable: nothing is bound for ${message.fields.routingKey}`));
      });
      channel.consume(queue, (message) => {
        const body = JSON.parse(message.content.toString("utf8"));
        const correlation = message.properties.correlationId ?? body.metadata?.correlation_id;
        if (body.message_type === "event") {
          onEvent?.(body);
        } else if (correlation === sent.message_id) {
          clearTimeout(timer);
          resolve(body);
        } // anything else is a stray reply to an earlier request: not ours, ignored
      }, { noAck: true });
    });
    channel.publish(EXCHANGE, `agent.${receiver}.request`, Buffer.from(JSON.stringify(sent)), {
      contentType: "application/json",
      messageId: sent.message_id,
      type: "request",
      replyTo: queue,
      expiration: String(timeout),
      persistent: true,
      mandatory: true,
    });
    console.error(`sent ${sent.message_id} on agent.${receiver}.request, replies to ${queue}`);
    return await reply;
  } finally {
    await connection.close();
  }
}

/**
 * A request whose skill may ask questions: sent as version 1.2, so a question comes back as a
 * response with status `input_required` and the question as its result. Each is answered
 * with the next of `answers`: `answer_question` sent to the question's `service` (any
 * instance takes it), whose reply is what the work does next: its result, or a question.
 */
async function converse(receiver, action, parameters, answers) {
  let reply = await request(receiver, action, parameters, { version: "1.2" });
  print(reply);
  for (const answer of answers) {
    if (reply.message_type !== "response" || reply.payload.status !== "input_required") break;
    const question = reply.payload.result;
    console.error(`${question.asker} asks: ${question.text}`);
    reply = await request(question.service, "answer_question", {
      question_id: question.question_id, answer,
    }, { version: "1.2" });
    print(reply);
  }
  return reply;
}

/** Submit a plan to the leader; print its progress events, then the leader's reply. */
async function plan(file) {
  const text = readFileSync(file === "-" ? 0 : file, "utf8");
  const reply = await request("leader", "run_plan", { plan: JSON.parse(text) }, {
    timeout: TIMEOUT * 10,
    onEvent: (event) => {
      if (event.payload.event_name === "plan_progress") print(event);
    },
  });
  print(reply);
  return reply;
}

/** Print `count` events named `name` sent to everyone (`broadcast.event.<name>`). */
async function listen(name, count) {
  const { connection, channel, queue } = await open();
  await channel.bindQueue(queue, EXCHANGE, `broadcast.event.${name}`);
  console.error(`listening on ${EXCHANGE} broadcast.event.${name} as ${SENDER}`);
  let seen = 0;
  await new Promise((resolve) => {
    channel.consume(queue, (message) => {
      print(JSON.parse(message.content.toString("utf8")));
      if (++seen === count) resolve();
    }, { noAck: true });
  });
  await connection.close();
}

/**
 * Read the artifact `reference` names (docs/wire.md, "Artifacts") into `path`.
 *
 * Its chunks are messages on the stream of its `location` (`<stream>@<offset>`), from that
 * offset on: those with its id in `agentbus-artifact` and type `artifact.chunk`, in the
 * order of `agentbus-seq` (other objects' messages come between them: skipped; a seq
 * already taken: skipped). Prints `{id, size, sha256, verified}`; the bytes are to be
 * trusted only when `verified` (their size and SHA-256 are the reference's).
 */
async function artifact(reference, path) {
  const ref = JSON.parse(reference);
  const at = ref.location.lastIndexOf("@");
  const [stream, offset] = [ref.location.slice(0, at), Number(ref.location.slice(at + 1))];
  const connection = await amqp.connect(URL);
  const channel = await connection.createChannel();
  await channel.prefetch(8); // a stream is read with a prefetch and acks
  const file = createWriteStream(path);
  const digest = createHash("sha256");
  let [seq, size, first] = [0, 0, true];
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("artifact_missing: no chunk came")), TIMEOUT);
      const done = (error) => { clearTimeout(timer); error ? reject(error) : resolve(); };
      channel.consume(stream, (message) => {
        channel.ack(message);
        const headers = message.properties.headers ?? {};
        if (first && Number(headers["x-stream-offset"]) > offset) {
          return done(new Error("artifact_missing: expired, its stream no longer holds it"));
        }
        first = false;
        if (headers["agentbus-artifact"] !== ref.id || message.properties.type !== "artifact.chunk") return;
        const n = Number(headers["agentbus-seq"]);
        if (n < seq) return; // sent twice after a lost confirm
        if (n > seq) return done(new Error(`artifact_corrupt: chunk ${seq} is missing`));
        digest.update(message.content);
        file.write(message.content);
        seq += 1;
        size += message.content.length;
        if (size >= ref.size) done();
      }, { arguments: { "x-stream-offset": offset } }).catch(done);
    });
  } finally {
    file.end();
    await once(file, "finish");
    await connection.close();
  }
  const sha256 = digest.digest("hex");
  const verified = size === ref.size && sha256 === ref.sha256;
  print({ id: ref.id, size, sha256, verified });
  return verified ? 0 : 1;
}

/** Run the command line; return the exit status. */
async function main([command, ...args]) {
  if (command === "request" && args.length >= 2) {
    const reply = await request(args[0], args[1], JSON.parse(args[2] ?? "{}"));
    print(reply);
    return reply.message_type === "response" && reply.payload.status === "success" ? 0 : 1;
  }
  if (command === "converse" && args.length >= 3) {
    const answers = args.slice(3).map((text) => JSON.parse(text));
    const reply = await converse(args[0], args[1], JSON.parse(args[2]), answers);
    return reply.message_type === "response" && reply.payload.status === "success" ? 0 : 1;
  }
  if (command === "plan" && args.length === 1) {
    const reply = await plan(args[0]);
    return reply.message_type === "response" && reply.payload.result?.status === "completed" ? 0 : 1;
  }
  if (command === "listen" && args.length >= 1) {
    await listen(args[0], Number(args[1] ?? 1));
    return 0;
  }
  if (command === "artifact" && args.length === 2) {
    return await artifact(args[0], args[1]);
  }
  console.error("usage: client.mjs request <receiver> <action> [parameters-json]");
  console.error("       client.mjs converse <receiver> <action> <parameters-json> <answer>...");
  console.error("       client.mjs plan <plan.json | ->");
  console.error("       client.mjs listen <event-name> [count]");
  console.error("       client.mjs artifact <reference-json> <file>");
  return 2;
}

main(process.argv.slice(2)).then(
  (status) => { process.exitCode = status; },
  (error) => {
    console.error(`client.mjs: ${error.message}`);
    process.exitCode = 2;
  },
);
