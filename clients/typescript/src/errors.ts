// What the ledger answers when the provider must not be called, as errors
// whose message tells a caller — a person or a language model — what to do
// next. The names are the Python client's, so one agent prompt fits both.
// BadArgument is the client's own refusal, before the ledger is asked.
//
// And what a provider call throws to say how it ended when it did not
// succeed: only NotPerformed and BusinessRejection record a failure;
// RateLimited a failure retryable after the provider's delay; anything else
// thrown after dispatched() records unknown.

export class EffectError extends Error {
  readonly decision: string = "";
  constructor(
    readonly opKey: string,
    readonly state: string,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

export class InFlight extends EffectError {
  override readonly decision = "in_flight";
  constructor(opKey: string, state: string) {
    super(
      opKey,
      state,
      `${opKey} is already in flight (state ${state}): the provider may have acted on it. ` +
        "Do not call it again and do not make a new key for the same action; " +
        "the reconciler or an operator settles it. Report that it is being checked.",
    );
  }
}

export class Held extends EffectError {
  override readonly decision = "held";
  constructor(opKey: string, state: string) {
    super(
      opKey,
      state,
      `${opKey} is held: another open effect on the same target conflicts with it. ` +
        "It was not sent. Do not retry under another key; an operator releases or cancels it.",
    );
  }
}

/** Each field the call changed: what the ledger recorded, what was offered now. */
export type Differences = Record<string, { recorded: unknown; now: unknown }>;

export class Rejected extends EffectError {
  override readonly decision = "rejected";
  constructor(
    opKey: string,
    state: string,
    readonly differences: Differences,
  ) {
    const shown = Object.entries(differences)
      .map(([field, { recorded, now }]) => `${field}: recorded ${JSON.stringify(recorded)}, now ${JSON.stringify(now)}`)
      .join("; ");
    super(
      opKey,
      state,
      `${opKey} was already used for another intent (${shown || "the terms differ"}). ` +
        "Nothing was sent. If this is a new action, it needs a new key built from its own " +
        "business arguments; if it is the same action, use the recorded terms.",
    );
  }
}

export class Stop extends EffectError {
  override readonly decision = "stop";
  constructor(
    opKey: string,
    state: string,
    readonly result: unknown,
  ) {
    super(
      opKey,
      state,
      `${opKey} is closed (state ${state}): it failed for good, was cancelled or compensated. ` +
        "Nothing was sent. Do not retry it; report the outcome.",
    );
  }
}

export class Overlap extends EffectError {
  override readonly decision = "overlap";
  constructor(
    opKey: string,
    state: string,
    readonly overlaps: unknown,
  ) {
    super(
      opKey,
      state,
      `${opKey} overlaps a booking already made on the target (${String(overlaps)}): it would be a ` +
        "second booking, not a retry. Nothing was sent.",
    );
  }
}

/**
 * The key is another caller's (another login of the ledger, outside its
 * tenant): the ledger answered `refused` and told nothing of the effect —
 * no state, no result. `state` is empty.
 */
export class NotYours extends EffectError {
  override readonly decision = "refused";
  constructor(opKey: string) {
    super(
      opKey,
      "",
      `${opKey} belongs to another caller: nothing was done, and nothing of its effect can be told. ` +
        "Do not retry it; make the key from your own business arguments, or ask an operator.",
    );
  }
}

export class Wait extends EffectError {
  override readonly decision = "wait";
  constructor(
    opKey: string,
    state: string,
    readonly retryAfter: number,
  ) {
    super(
      opKey,
      state,
      `${opKey} was rate limited by the provider: call again with the same arguments ` +
        `after ${retryAfter} seconds. Nothing was sent.`,
    );
  }
}

/**
 * An argument from which no key or params can be made: missing or blank
 * where the key needs it, money that is not a whole number of minor units,
 * a number JSON cannot hold. Thrown before the ledger is written, so there
 * is no key (`opKey` is empty) and no state.
 */
export class BadArgument extends EffectError {
  override readonly decision = "bad_argument";
  /** `where` is the place within the argument (`address.lines[0].qty`), when not the argument itself. */
  constructor(
    readonly argument: string,
    problem: string,
    instead: string,
    readonly where: string = argument,
  ) {
    super("", "", `${where} ${problem}. Nothing was done: no effect was recorded and the provider was not called. ${instead}`);
  }
}

/**
 * The provider acted, but its answer cannot be stored as JSON (NaN,
 * ±Infinity, a bigint): the effect is recorded unknown, with the reason,
 * for the reconciler or an operator to settle.
 */
export class UnstorableResult extends EffectError {
  constructor(
    opKey: string,
    readonly externalRef: string | null,
    readonly unstorable: string,
  ) {
    super(
      opKey,
      "unknown",
      `${opKey}: the provider acted${externalRef ? ` (${externalRef})` : ""}, but its answer holds ${unstorable}, ` +
        "which the ledger cannot store. It is recorded unknown for the reconciler or an operator to settle: " +
        "do not call it again, report that it is being checked. The tool must return JSON " +
        "(such a number as a string, or null).",
    );
  }
}

/**
 * Throw it when the provider certainly did nothing (a refusal before the
 * call, or a provider answer that says so): the effect is recorded failed,
 * and retryable unless told otherwise.
 */
export class NotPerformed extends Error {
  readonly retryable: boolean;
  constructor(
    readonly reason: string,
    options: { retryable?: boolean } = {},
  ) {
    super(reason);
    this.name = new.target.name;
    this.retryable = options.retryable ?? true;
  }
}

/** The provider refused these terms for good: failed, never retried. */
export class BusinessRejection extends NotPerformed {
  constructor(reason: string) {
    super(reason, { retryable: false });
  }
}

/** The provider asked to be called again later, with the same key. */
export class RateLimited extends Error {
  constructor(
    readonly retryAfter: number,
    readonly reason = "rate limited",
  ) {
    super(`${reason} (retry after ${retryAfter} s)`);
    this.name = new.target.name;
  }
}

/** A provider answer that is not a success: a 5xx is server_error (the outcome is unknown). */
export class ProviderError extends Error {
  constructor(
    readonly status: number,
    reason = "",
  ) {
    super(`provider answered ${status} ${reason}`.trim());
    this.name = new.target.name;
  }
}

/** The ledger refused a writer call (another login's effect, another target's key): nothing was written. */
export class LedgerRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}
