/**
 * The shapes of the kernel's ambient state (random generators, library
 * settings, warnings filters, working folder, environment variables,
 * IPython's extensions, backend, `%config`, `%precision`, execution counter
 * and display formatters), which travels with a checkpoint beside the
 * namespace: what a pause's dry run says cannot travel, and what a resume
 * restored. Derived from the REST API's OpenAPI document; re-exported by
 * `tokens.ts`.
 */
import type { components } from '../generated/openapi';

/**
 * A piece of ambient state that does not travel, and why (what it is, e.g.
 * `thread worker-1` or `child process 1234 (python)`; what that means
 * after the resume).
 */
export type IAmbientItem = components['schemas']['NameReason'];

/**
 * The ambient state in the dry run of a pause (`POST check`): what the
 * checkpoint would carry (`random state`, `matplotlib settings`…) and what
 * would not continue after the resume, with why.
 */
export type ICheckAmbient = NonNullable<
  components['schemas']['CheckReport']['ambient']
>;

/**
 * The ambient state in a restore report: what came back as it was, what
 * came back by re-running its cells, and what could not; `text` is the
 * kernel's one sentence about it ("Random state, plotting settings and 2
 * extensions restored"), in English.
 */
export type IRestoreAmbient = components['schemas']['AmbientRestore'];
