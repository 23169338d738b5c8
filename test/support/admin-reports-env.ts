import { FAKE_ANTHROPIC_ADMIN_KEY, FAKE_WORKSPACE_ID, type FakeAnthropic } from './fake-anthropic';
import { FAKE_ADMIN_KEY, FAKE_PROJECT_ID, type FakeOpenAI } from './fake-openai';

/** What `cronledger reconcile` needs to read the fakes' admin reports: their URLs, admin keys, and cronledger's project and workspace. */
export const adminReportsEnv = (openai: FakeOpenAI, anthropic: FakeAnthropic): NodeJS.ProcessEnv => ({
  OPENAI_BASE_URL: openai.baseURL,
  OPENAI_ADMIN_KEY: FAKE_ADMIN_KEY,
  ANTHROPIC_BASE_URL: anthropic.baseURL,
  ANTHROPIC_ADMIN_KEY: FAKE_ANTHROPIC_ADMIN_KEY,
  CRONLEDGER_OPENAI_PROJECT_IDS: FAKE_PROJECT_ID,
  CRONLEDGER_ANTHROPIC_WORKSPACE_IDS: FAKE_WORKSPACE_ID,
});
