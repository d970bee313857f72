// The OpenAI Agents SDK (`@openai/agents`, 0.20) face of a wrapped effect:
// a function tool whose execute is the wrapped call. Whatever the call
// throws reaches the model through the tool's errorFunction with the text
// of toolErrorFor — never the SDK's default "An error occurred while
// running the tool. Please try again.", which would ask for the very retry
// a lost reply must not get — and the run goes on. A replay returns the
// stored result.

import { tool, type FunctionTool, type ToolExecuteArgument, type ToolInputParameters } from "@openai/agents";
import { EffectToolError, toolErrorFor } from "./answers.js";

export { EffectToolError, toolErrorFor } from "./answers.js";

export interface EffectToolOptions<P extends ToolInputParameters> {
  /** The tool's name, as the model calls it. */
  name: string;
  /** What the tool does, for the model. */
  description: string;
  /**
   * The arguments' schema: a zod object schema (strict, parsed and
   * validated by the SDK), or a JSON schema object (strict when its
   * additionalProperties is false).
   */
  parameters: P;
}

// What the wrapped call takes: the schema's own type for zod, anything for
// a JSON schema (the SDK does not validate one).
type ArgumentsOf<P extends ToolInputParameters> = unknown extends ToolExecuteArgument<P> ? any : ToolExecuteArgument<P>;

/**
 * `effect` is a function made by `ledger.wrap(...)`: its key and target
 * come from the call's arguments, never from the tool call's id.
 */
export function effectTool<P extends ToolInputParameters, R>(
  effect: (args: ArgumentsOf<P>) => Promise<R>,
  options: EffectToolOptions<P>,
): FunctionTool<unknown, P, R> {
  const parameters = options.parameters as unknown as Record<string, unknown>;
  const isJsonSchema = !("~standard" in parameters) && !("_def" in parameters) && !("_zod" in parameters);
  const common = {
    name: options.name,
    description: options.description,
    execute: async (args: unknown): Promise<R> => {
      try {
        return await effect(args as ArgumentsOf<P>);
      } catch (error) {
        throw toolErrorFor(error);
      }
    },
    errorFunction: (_context: unknown, error: unknown): string =>
      error instanceof EffectToolError
        ? error.message
        : // Not from the call: the SDK refused the arguments before running it.
          `The tool was not run: ${refusal(error)}. Nothing was done. Call it again with arguments that fit its schema.`,
  };
  // A JSON schema is strict only when it says so (additionalProperties
  // false); zod and other Standard Schemas are always strict.
  type Loose = Extract<ToolInputParameters, { additionalProperties: true }>;
  type Strict = Exclude<ToolInputParameters, Loose | undefined>;
  const made =
    isJsonSchema && parameters["additionalProperties"] !== false
      ? tool({ ...common, parameters: options.parameters as Loose, strict: false })
      : tool({ ...common, parameters: options.parameters as Strict, strict: true });
  return made as unknown as FunctionTool<unknown, P, R>;
}

// The SDK's own words, and its validator's where it keeps them (it drops
// them unless tool data may be logged: OPENAI_AGENTS_DONT_LOG_TOOL_DATA=0).
function refusal(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const original = (error as { originalError?: unknown }).originalError;
  const detail = original instanceof Error ? ` (${original.message.replace(/\s+/g, " ").slice(0, 400)})` : "";
  return `${error.message}${detail}`;
}
