export * from "./errors.js";
export { Ledger, Effect, refusalFor, differences } from "./ledger.js";
export type { Intent, Begun, Dispatch, Completed, Completion, LedgerOptions, WrapSpec, Json } from "./ledger.js";
export { outcomeOf, type Outcome } from "./outcome.js";
