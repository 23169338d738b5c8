/**
 * Encode options for gpt-tokenizer that count a special token's text (`<|endoftext|>`, `<|im_start|>`, ...) in a
 * prompt or a reply as the plain text it is, as OpenAI's API does with user content. The tokenizer's default throws
 * on it ("Disallowed special token found"), which made a task whose prompt or reply merely contained such text fail
 * its budget decision or its embedding again and again.
 */
export const PLAIN_TEXT_TOKENS = { disallowedSpecial: new Set<string>() };
