// @locker/agent: the parcel-locker terminal agent (docs/agent.md, docs/edge-protocol.md).
export { Agent, AGENT_VERSION, type AgentOptions, type AgentState, type UnlockOutcome } from './agent';
export { AgentConfigSchema, AgentConfigError, loadAgentConfig, AGENT_ENV_MAP, type AgentConfig, type AgentConfigInput } from './config';
export { AgentStore, type JournalRow, type CodesMeta } from './store';
export { EdgeLink, eventPayload } from './edge-link';
export { decideCodes, type CodesDecision } from './codes';
export { sessionStep, closeOutcome, lockKey, type Session, type SessionEffect, type SessionInput } from './session';
export { DiagnosticsServer } from './diagnostics';
export { createAgentLogger, AGENT_REDACTED_KEYS, type AgentLoggerOptions } from './logger';
