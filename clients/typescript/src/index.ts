export * from "./errors.js";
export { Ledger, Effect, Heartbeats, aftermathOf, refusalFor, differences } from "./ledger.js";
export { EffectToolError, toolErrorFor } from "./answers.js";
export { ArgumentRules, KeyTemplate, canonicalJson, canonicalParams, compareCodePoints, keyForm, plainDecimal, wholeMinorUnits } from "./keys.js";
export type { Normalise, Normaliser } from "./keys.js";
export type { Intent, Begun, Beat, Dispatch, Completed, Completion, LedgerOptions, WrapSpec, Json, Aftermath, Recorded } from "./ledger.js";
export { outcomeOf, type Outcome } from "./outcome.js";
export { NotPrimary } from "./primary.js";
