export * from './codec/index';
