/** Parses "90s", "10m", "1h30m" into milliseconds; undefined when malformed. No workflow imports this. */
export function parseDuration(text: string): number | undefined {
  const m = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(text.trim());
  if (!m || text.trim() === '' || (m[1] === undefined && m[2] === undefined && m[3] === undefined)) return undefined;
  const [, h = '0', min = '0', s = '0'] = m;
  return ((Number(h) * 60 + Number(min)) * 60 + Number(s)) * 1000;
}
