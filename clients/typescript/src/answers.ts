// What a language model is told when a tool call made through the ledger
// does not return a result: what happened, whether the effect may already
// have happened, and what not to do next. The framework adapters
// (effectwatch/ai, effectwatch/openai-agents) give it to the model as the
// tool's error; any other loop can do the same with toolErrorFor(error).

import { EffectError, InFlight, UnstorableResult } from "./errors.js";
import { aftermathOf, type Aftermath } from "./ledger.js";

/**
 * A tool call's failure as its text for the model (the message, which is
 * also what toString() gives, so a framework that shows the model
 * `String(error)` shows only the text). `cause` is what was thrown.
 */
export class EffectToolError extends Error {
  /** Whether the effect may have happened at the provider: the model is told not to call it again. */
  readonly mayHaveHappened: boolean;

  constructor(message: string, options: { cause: unknown; mayHaveHappened: boolean }) {
    super(message, { cause: options.cause });
    this.name = "EffectToolError";
    this.mayHaveHappened = options.mayHaveHappened;
  }

  override toString(): string {
    return this.message;
  }
}

/**
 * The answer for anything a wrapped effect (`ledger.wrap`) or
 * `ledger.effect` threw. An EffectError's own message is the answer; for
 * anything else what the ledger recorded decides it: a failure the provider
 * certainly did not act on says so, and everything else — a lost reply, a
 * timeout, a 5xx, a ledger out of reach after dispatch, an error from
 * unknown code — says the effect may already have happened and must not be
 * called again.
 */
export function toolErrorFor(error: unknown): EffectToolError {
  if (error instanceof EffectToolError) return error;
  if (error instanceof EffectError) {
    const unknown = error.state === "unknown";
    if (error instanceof InFlight && unknown) {
      return new EffectToolError(
        `${error.opKey} may already have happened: its outcome is unknown and is being checked. ` +
          "Do not call it again and do not try another way to do it (another key, other arguments); " +
          "the reconciler or an operator settles it with the provider. Tell the user it is being checked.",
        { cause: error, mayHaveHappened: true },
      );
    }
    return new EffectToolError(error.message, {
      cause: error,
      mayHaveHappened: unknown || error instanceof InFlight || error instanceof UnstorableResult,
    });
  }
  const aftermath = aftermathOf(error);
  if (aftermath === undefined) {
    return new EffectToolError(
      `The call failed (${describe(error)}) and its outcome is not known: it may already have happened. ` +
        "Do not call it again; report that it needs checking.",
      { cause: error, mayHaveHappened: true },
    );
  }
  return answerAfter(aftermath, error);
}

function answerAfter(aftermath: Aftermath, error: unknown): EffectToolError {
  const { intent, dispatched, recorded } = aftermath;
  const what = intent ? `This ${intent.action} on ${intent.target} (key ${intent.opKey})` : "This call";
  const reason = recorded?.reason ?? describe(error);
  const mayHave = (text: string) => new EffectToolError(text, { cause: error, mayHaveHappened: true });
  const notDone = (text: string) => new EffectToolError(text, { cause: error, mayHaveHappened: false });

  if (recorded === null) {
    if (dispatched) {
      return mayHave(
        `${what} may already have happened: the provider was called, but its outcome could not be recorded ` +
          `in the effect ledger (${reason}). Do not call it again and do not try another way to do it; ` +
          "an operator will reconcile it with the provider. Tell the user it is being checked.",
      );
    }
    return notDone(
      `${what} was not done: it failed before the provider was called (${reason}), so nothing was sent. ` +
        "Report the failure; do not work around it with other arguments or another key.",
    );
  }
  switch (recorded.outcome) {
    case "unknown":
      return mayHave(
        `${what} may already have happened: the provider was called but its answer was lost (${reason}), ` +
          "so its outcome is unknown. Do not call it again and do not try another way to do it (another key, " +
          "other arguments); it is recorded for the reconciler or an operator to check with the provider. " +
          "Tell the user it is being checked.",
      );
    case "failed":
      if (recorded.errorClass === "rate_limited") {
        return notDone(
          `${what} was not done: the provider asked to wait (${reason}). Nothing happened. ` +
            `Call it again with the same arguments after ${recorded.retryAfter ?? 60} seconds.`,
        );
      }
      if (recorded.retryable === false) {
        return notDone(
          `${what} was refused for good by the provider (${reason}). Nothing happened. ` +
            "Do not retry it, under these or other arguments; report the refusal.",
        );
      }
      return notDone(
        `${what} was not done (${reason}): the provider did not act on it. It may be called again with the ` +
          "same arguments once the cause is fixed; do not change them to get around it.",
      );
    case "succeeded":
      return mayHave(
        `${what} was done: the provider confirmed it, but the tool failed afterwards (${reason}). ` +
          "Do not call it again; report what was done.",
      );
    default:
      return mayHave(
        `${what} ended ${recorded.outcome} (${reason}): it may already have happened. Do not call it again; ` +
          "report that it needs checking.",
      );
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}
