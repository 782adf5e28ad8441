// The one Node.js global the examples use (no @types/node dependency).
declare const process: {
  env: Record<string, string | undefined>;
  exit(code?: number): never;
};
