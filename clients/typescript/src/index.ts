export * from "./errors.js";
export { Ledger, Effect, refusalFor, differences } from "./ledger.js";
export { ArgumentRules, KeyTemplate, canonicalJson, canonicalParams, compareCodePoints, keyForm, plainDecimal, wholeMinorUnits } from "./keys.js";
export type { Normalise, Normaliser } from "./keys.js";
export type { Intent, Begun, Dispatch, Completed, Completion, LedgerOptions, WrapSpec, Json } from "./ledger.js";
export { outcomeOf, type Outcome } from "./outcome.js";
