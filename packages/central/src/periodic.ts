// A background job run again and again with a pause between the end of one run and the start of
// the next (a run never overlaps the one before), for workers' start()/stop(): stop() ends the
// pauses and waits for a run under way. `run` answers for its own errors.
export class Periodic {
  private running = false;
  private timer: NodeJS.Timeout | null = null;
  private current: Promise<void> | null = null;

  constructor(
    private readonly pauseMs: () => number,
    private readonly run: () => Promise<void>,
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule();
  }

  private schedule(): void {
    if (!this.running) return;
    this.timer = setTimeout(() => {
      this.current = this.run().finally(() => {
        this.current = null;
        this.schedule();
      });
    }, this.pauseMs());
  }

  async stop(): Promise<void> {
    this.running = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.current;
  }
}
