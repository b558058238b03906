// Validate AsyncAPI documents with the official parser: node check.mjs FILE...
// Prints one JSON line per file: {"file", "valid", "version", "errors": [...], "warnings": n}.
// Exit status 0 when every file is a valid AsyncAPI document, 1 otherwise.

import { readFileSync } from "node:fs";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";

const parser = new Parser();
let status = 0;
for (const file of process.argv.slice(2)) {
  const { document, diagnostics } = await parser.parse(readFileSync(file, "utf8"));
  const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error);
  if (document === undefined || errors.length > 0) status = 1;
  console.log(JSON.stringify({
    file,
    valid: document !== undefined && errors.length === 0,
    version: document?.version(),
    channels: document ? document.channels().all().map((c) => c.address()) : [],
    operations: document ? document.operations().all().map((o) => o.id()) : [],
    errors: errors.map((d) => ({ code: d.code, message: d.message, path: d.path.join(".") })),
    warnings: diagnostics.filter((d) => d.severity === DiagnosticSeverity.Warning)
      .map((d) => `${d.code}: ${d.message} (${d.path.join(".")})`),
  }));
}
process.exitCode = status;
