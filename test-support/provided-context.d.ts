// Values the global setup hands to every test file through inject().
import 'vitest';

declare module 'vitest' {
  export interface ProvidedContext {
    pgUrl: string | null;
    mqttUrl: string | null;
  }
}
