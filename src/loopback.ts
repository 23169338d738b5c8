/**
 * A name of this machine's loopback interface, as a bind address, a Host header's name or a URL's hostname:
 * localhost, 127.0.0.0/8, or ::1 (bracketed as in a URL or Host header, or bare as a bind address).
 */
export function isLoopbackName(name: string): boolean {
  const lower = name.toLowerCase();
  return lower === 'localhost' || lower === '::1' || lower === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(lower);
}
