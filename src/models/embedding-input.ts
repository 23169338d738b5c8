import { decode, encode } from 'gpt-tokenizer/model/text-embedding-3-small';
import { PLAIN_TEXT_TOKENS } from './plain-text-tokens';
import { bareModel } from './provider';

/**
 * Input limits of the embedding models, in tokens (OpenAI: 8191 for text-embedding-3-small/-large and ada-002, all on
 * the cl100k_base encoding). A model not listed gets the same limit and encoding: an approximation that only matters
 * for replies longer than about 30,000 characters.
 */
const EMBEDDING_INPUT_LIMITS: Record<string, number> = {
  'text-embedding-3-small': 8191,
  'text-embedding-3-large': 8191,
  'text-embedding-ada-002': 8191,
};
const DEFAULT_EMBEDDING_INPUT_LIMIT = 8191;

export const embeddingInputLimit = (model: string): number => EMBEDDING_INPUT_LIMITS[bareModel(model)] ?? DEFAULT_EMBEDDING_INPUT_LIMIT;

export interface EmbeddingInput {
  text: string;
  /** The input's token count before truncation, when it had to be cut to the model's limit; undefined otherwise. */
  truncatedFromTokens?: number;
}

/** Cuts the text to the model's input limit, by tokens (never by characters), so the embedding call can't be refused for length. */
export function fitEmbeddingInput(model: string, text: string, limit = embeddingInputLimit(model)): EmbeddingInput {
  // The encoding is byte-level BPE: every token covers at least one byte of the UTF-8 text, so a text of at most
  // `limit` bytes fits, and is not tokenized: a run's reply usually is that short (tokenizing it cost a worker in P1).
  if (Buffer.byteLength(text, 'utf8') <= limit) return { text };
  const tokens = encode(text, PLAIN_TEXT_TOKENS);
  if (tokens.length <= limit) return { text };
  return { text: decode(tokens.slice(0, limit)), truncatedFromTokens: tokens.length };
}
