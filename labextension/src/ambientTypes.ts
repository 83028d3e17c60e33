/**
 * The shapes of the kernel's ambient state (random generators, library
 * settings, warnings filters, working folder, environment variables,
 * IPython's extensions, backend, `%config`, `%precision`, execution counter
 * and display formatters), which travels with a checkpoint beside the
 * namespace: what a pause's dry run says cannot travel, and what a resume
 * restored. Re-exported by `tokens.ts`.
 */

/**
 * A piece of ambient state that does not travel, and why.
 */
export interface IAmbientItem {
  /** What it is, e.g. `thread worker-1` or `child process 1234 (python)`. */
  name: string;
  /** Why it does not travel, and what that means after the resume. */
  reason: string;
}

/**
 * The ambient state in the dry run of a pause (`POST check`): what the
 * checkpoint would carry and what would not continue after the resume.
 */
export interface ICheckAmbient {
  /** What would travel, e.g. `random state`, `matplotlib settings`. */
  carried: string[];
  /** What would not continue after the resume, with why. */
  not_carried: IAmbientItem[];
}

/**
 * The ambient state in a restore report: what came back as it was, what
 * came back by re-running its cells, and what could not.
 */
export interface IRestoreAmbient {
  /** What was restored as a value. */
  restored: string[];
  /** What was made again by re-running the cells that made it. */
  rerun: string[];
  /** What could not be restored, with why. */
  not_restored: IAmbientItem[];
  /**
   * The kernel's one sentence about it ("Random state, plotting settings
   * and 2 extensions restored"), in English; `null` when it has none.
   */
  text?: string | null;
}
