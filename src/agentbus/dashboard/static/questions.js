// The open questions of the team, and a form to answer each (loaded before app.js, whose
// helpers it calls: el, cell, pill, ago, act, notice, state). A form is made from the
// answer's JSON Schema where it is simple (a string, a yes-or-no, a number, a choice, or
// an object of those); otherwise the answer is written as JSON.
"use strict";

// ---- the form, from the answer's schema ------------------------------------

// A field's schema without its "or null" (an optional field in a pydantic model).
function unwrapped(schema) {
  const options = Array.isArray(schema.anyOf) ? schema.anyOf : null;
  if (!options) return schema;
  const given = options.filter((option) => option.type !== "null");
  return given.length === 1 ? { ...given[0], title: schema.title, default: schema.default } : schema;
}

// One input for a simple schema: { node, read } (read() is undefined when left empty),
// or null when the schema is not simple. A secret (an authorization's) is not shown typed.
function field(raw, label, required, secret) {
  const schema = unwrapped(raw);
  const name = { "aria-label": label, required };
  const choices = Array.isArray(schema.enum) ? schema.enum : "const" in schema ? [schema.const] : null;
  if (choices) {
    const select = el("select", name, el("option", { value: "" }, "–"),
      choices.map((choice) => el("option", { value: JSON.stringify(choice) }, String(choice))));
    return { node: select, read: () => (select.value === "" ? undefined : JSON.parse(select.value)) };
  }
  if (schema.type === "boolean") {
    const select = el("select", name, el("option", { value: "" }, "–"),
      el("option", { value: "true" }, "yes"), el("option", { value: "false" }, "no"));
    if (typeof schema.default === "boolean") select.value = String(schema.default);
    return { node: select, read: () => (select.value === "" ? undefined : select.value === "true") };
  }
  if (schema.type === "integer" || schema.type === "number") {
    const bounds = "minimum" in schema && "maximum" in schema ? `${schema.minimum}–${schema.maximum}` : null;
    const input = el("input", { ...name, type: "number", min: schema.minimum, max: schema.maximum,
      step: schema.type === "integer" ? 1 : "any", value: schema.default, placeholder: bounds });
    return { node: input, read: () => (input.value === "" ? undefined : Number(input.value)) };
  }
  if (schema.type === "string") {
    const input = el("input", { ...name, type: secret ? "password" : "text", minlength: schema.minLength,
      maxlength: schema.maxLength, pattern: schema.pattern, value: schema.default });
    return { node: input, read: () => (input.value === "" && !required ? undefined : input.value) };
  }
  return null;
}

// The whole answer's inputs: { nodes, read }; a JSON text area where no form fits.
function answerInputs(schema, secret) {
  const one = field(schema, "answer", true, secret);
  if (one) return { nodes: [one.node], read: one.read };
  const properties = schema.type === "object" && schema.properties ? schema.properties : null;
  if (properties) {
    const needed = new Set(schema.required || []);
    const fields = Object.entries(properties)
      .map(([key, sub]) => [key, sub, field(sub, key, needed.has(key), secret)]);
    if (fields.every(([, , made]) => made)) {
      return {
        nodes: fields.map(([key, sub, made]) => el("label", { class: "field" },
          el("span", {}, sub.title || key, needed.has(key) ? " *" : ""), made.node)),
        read: () => Object.fromEntries(fields.map(([key, , made]) => [key, made.read()])
          .filter(([, value]) => value !== undefined)),
      };
    }
  }
  const area = el("textarea", { "aria-label": "answer (JSON)", rows: 3, required: true,
    placeholder: "the answer, as JSON" });
  return { nodes: [area], read: () => JSON.parse(area.value) };
}

// ---- the board -------------------------------------------------------------

function until(iso) {
  if (!iso) return "no time limit";
  const seconds = (Date.parse(iso) - Date.now() - state.skew) / 1000;
  if (seconds <= 0) return "expired";
  if (seconds < 90) return `${Math.round(seconds)} s left`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min left`;
  return `${Math.round(seconds / 3600)} h left`;
}

function askedFor(q) {
  if (q.plan_id) {
    return [`plan `, el("strong", {}, q.plan_id), `, step `, el("strong", {}, q.subtask_id),
      ` · asked by its leader ${q.asker}`];
  }
  return [`asked by ${q.asker} (service ${q.service}) · for request `,
    el("code", {}, q.request_id), q.caller ? ` from ${q.caller}` : ""];
}

function renderQuestion(q) {
  const inputs = answerInputs(q.answer_schema || {}, q.kind === "auth");
  const form = el("form", { class: "answer", autocomplete: "off" }, inputs.nodes,
    el("button", { type: "submit", "data-action": "answer" }, "Answer"),
    el("button", { type: "button", class: "danger", "data-action": "decline",
      onclick: () => answer(q, { decline: true }) }, "Decline"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    let value;
    try {
      value = inputs.read();
    } catch (error) {
      notice(`the answer is not JSON: ${error.message}`, "error");
      return;
    }
    answer(q, { answer: value });
  });
  const parts = [
    el("h3", {}, el("span", { class: "question-text" }, q.text), pill(q.kind, "input_required"),
      q.rejected ? pill("asked again", "retrying") : null),
    el("p", { class: "muted" }, askedFor(q), " · ",
      el("span", { class: "age", "data-at": q.asked_at }, ago(q.asked_at)), " · ",
      el("span", { class: "until", "data-until": q.expires_at || "" }, until(q.expires_at))),
  ];
  if (q.rejected) {
    const why = (q.rejected.errors || []).map((e) => `${e.field}: ${e.error}`).join("; ");
    parts.push(el("p", { class: "rejected" }, `The last answer did not fit: ${why}`));
  }
  if (q.data) {
    parts.push(el("details", {}, el("summary", {}, "what it is about"),
      el("pre", {}, JSON.stringify(q.data, null, 2))));
  }
  parts.push(form, el("details", {}, el("summary", {}, "answer schema"),
    el("pre", {}, JSON.stringify(q.answer_schema, null, 2))));
  return el("div", { class: "card question", "data-question-id": q.question_id }, parts);
}

function showAnswering(node, q) {
  node.dataset.answering = q.answering ? "true" : "false";
  for (const button of node.querySelectorAll("form.answer button")) {
    button.disabled = !state.allowed || Boolean(q.answering);
  }
}

// Cards are kept, not rebuilt, while their question is open: an answer being typed stays.
function renderQuestions(board) {
  const root = document.getElementById("question-list");
  const count = board.questions.length;
  document.getElementById("questions-summary").textContent = count ? `${count} open` : "";
  document.getElementById("nav-questions").textContent = count ? `Questions (${count})` : "Questions";
  document.getElementById("questions-empty").hidden = count > 0;
  const cards = new Map([...root.children].map((node) => [node.dataset.questionId, node]));
  const open = new Set(board.questions.map((q) => q.question_id));
  for (const [id, node] of cards) if (!open.has(id)) node.remove();
  let next = null;
  for (const q of [...board.questions].reverse()) {
    const node = cards.get(q.question_id) || renderQuestion(q);
    if (node.parentNode !== root || node.nextSibling !== next) root.insertBefore(node, next);
    showAnswering(node, q);
    next = node;
  }
  renderAnswers(board.answers);
}

function outcomeText(a) {
  if (a.outcome === "result") return a.result;
  if (a.outcome === "accepted") return "the plan's leader took it; the plan goes on";
  if (a.outcome === "asked") return `the work asks again (${a.next_question_id})`;
  if (a.outcome === "waiting") return "sent; waiting for the work";
  return a.error ? `${a.error.code}: ${a.error.message}` : "";
}

function renderAnswers(answers) {
  const root = document.getElementById("answer-list");
  root.hidden = !answers.length;
  if (!answers.length) return;
  const rows = answers.map((a) => el(
    "tr",
    { "data-answered-id": a.question_id, "data-outcome": a.outcome },
    cell("question", a.text || el("code", {}, a.question_id)),
    cell("by", a.declined ? `${a.by} (declined)` : a.by),
    cell("when", el("span", { class: "age", "data-at": a.at }, ago(a.at))),
    cell("outcome", pill(a.outcome, { result: "succeeded", accepted: "succeeded", asked: "retrying",
      waiting: "running" }[a.outcome] || "failed")),
    cell("what came of it", a.outcome === "result" ? el("pre", {}, a.result) : outcomeText(a)),
  ));
  root.replaceChildren(el("h3", {}, "Answered from here"), el("table", {},
    el("thead", {}, el("tr", {}, ...["question", "by", "when", "outcome", "what came of it"]
      .map((h) => el("th", {}, h)))),
    el("tbody", {}, rows)));
}

async function answer(q, body) {
  try {
    const sent = await act(`/api/questions/${encodeURIComponent(q.question_id)}/answer`, body);
    notice(`${body.decline ? "declined" : "answered"}: ${outcomeText(sent)}`,
      sent.outcome === "failed" ? "error" : "info");
  } catch (error) {
    notice(`answer refused: ${error.message}`, "error");
  }
}

function tickUntil() {
  for (const node of document.querySelectorAll(".until[data-until]")) {
    node.textContent = until(node.dataset.until);
  }
}
