/**
 * The sentences of a rebuild: what the last resume did not bring back,
 * exactly which cells re-running would make it again (before anything
 * runs), and what a rebuild did. Shared by the notifications and the panel
 * so that both say the same. Toasts show 140 characters: the names and the
 * cells come first, reasons last. Pure functions: no DOM, no server.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import { durationText, sentence } from '../format';
import {
  IRebuildCell,
  IRebuildFailedDetail,
  IRebuildPlan,
  IRebuiltDetail
} from '../tokens';

/**
 * How many names a sentence lists before "and 3 more".
 */
const MAX_NAMES = 4;

/**
 * How many cell numbers a sentence lists before "and 3 more".
 */
const MAX_CELLS = 6;

/**
 * How much of a cell's first line a toast quotes.
 */
const MAX_CODE = 40;

/**
 * The longest error a toast quotes (it shows 140 characters in all).
 */
const MAX_ERROR = 300;

/**
 * Names as code, listed: "`batches`, `h`", "`a`, `b`, `c`, `d` and 2 more".
 */
export function namesText(
  names: ReadonlyArray<string>,
  trans: TranslationBundle
): string {
  const shown = names.slice(0, MAX_NAMES).map(n => `\`${n}\``);
  const more = names.length - shown.length;
  return more > 0
    ? trans.__('%1 and %2 more', shown.join(', '), more)
    : shown.join(', ');
}

/**
 * A cell as the notebook labels it: "[3]", or "[?]" when it had no number.
 */
export function cellLabel(cell: Pick<IRebuildCell, 'execution_count'>): string {
  return cell.execution_count === null || cell.execution_count === undefined
    ? '[?]'
    : `[${cell.execution_count}]`;
}

/**
 * "cell [2]" or "cells [3], [4], [5]" (the first few, then "and 3 more").
 */
export function cellsText(
  cells: ReadonlyArray<Pick<IRebuildCell, 'execution_count'>>,
  trans: TranslationBundle
): string {
  const shown = cells.slice(0, MAX_CELLS).map(cellLabel).join(', ');
  const more = cells.length - Math.min(cells.length, MAX_CELLS);
  const listed = more > 0 ? trans.__('%1 and %2 more', shown, more) : shown;
  return cells.length === 1
    ? trans.__('cell %1', listed)
    : trans.__('cells %1', listed);
}

/**
 * A recorded run time: "0.0 s", "12.5 s", "3 min"; "run time unknown" when
 * a cell's time was not recorded (it ran before the cell log started).
 */
export function planSecondsText(
  seconds: number | null | undefined,
  trans: TranslationBundle
): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return trans.__('run time unknown');
  }
  return seconds < 90
    ? trans.__('%1 s', seconds.toFixed(1))
    : durationText(seconds, trans);
}

/**
 * How long a rebuild took, finer than a plan's estimate: "0.25 s", "under
 * 0.01 s" (never a bare "0.00 s").
 */
export function tookText(seconds: number, trans: TranslationBundle): string {
  if (seconds < 0.005) {
    return trans.__('under %1 s', (0.01).toFixed(2));
  }
  if (seconds < 10) {
    return trans.__('%1 s', seconds.toFixed(2));
  }
  return seconds < 90
    ? trans.__('%1 s', seconds.toFixed(1))
    : durationText(seconds, trans);
}

/**
 * What the resume did not bring back: "`batches`, `h` were not saved."
 * Names whose restore failed (`failed`) are told apart from those the pause
 * could not save.
 */
export function lostText(
  names: ReadonlyArray<string>,
  failed: ReadonlyArray<string>,
  trans: TranslationBundle
): string {
  const broken = names.filter(n => failed.includes(n));
  const unsaved = names.filter(n => !failed.includes(n));
  const parts: string[] = [];
  if (unsaved.length) {
    parts.push(
      trans._n(
        '%2 was not saved.',
        '%2 were not saved.',
        unsaved.length,
        namesText(unsaved, trans)
      )
    );
  }
  if (broken.length) {
    parts.push(
      trans._n(
        '%2 could not be restored.',
        '%2 could not be restored.',
        broken.length,
        namesText(broken, trans)
      )
    );
  }
  return parts.join(' ');
}

/**
 * The plan, before anything runs: "Re-run cells [3], [4], [5] (0.0 s) to
 * rebuild them."
 */
export function planText(plan: IRebuildPlan, trans: TranslationBundle): string {
  return trans._n(
    'Re-run %2 (%3) to rebuild it.',
    'Re-run %2 (%3) to rebuild them.',
    plan.names.length,
    cellsText(plan.cells, trans),
    planSecondsText(plan.seconds, trans)
  );
}

/**
 * The names no cell can make again, with why: "Cannot rebuild `g`: its
 * cell is marked gp: no-rerun."; '' when there are none.
 */
export function unbuildableText(
  plan: IRebuildPlan,
  trans: TranslationBundle
): string {
  const items = plan.unbuildable ?? [];
  if (!items.length) {
    return '';
  }
  const reasons = items.map(u => `\`${u.name}\`: ${u.reason}`).join('; ');
  return sentence(trans.__('Cannot rebuild %1', reasons));
}

/**
 * The offer of a resume, for its toast and the panel: what did not come
 * back, the plan, then what cannot be rebuilt and why. `failed` are the
 * names whose restore failed (the others were not saved).
 */
export function offerText(
  plan: IRebuildPlan,
  failed: ReadonlyArray<string>,
  trans: TranslationBundle
): string {
  const parts = [];
  if (plan.names.length) {
    parts.push(lostText(plan.names, failed, trans), planText(plan, trans));
  } else {
    const names = (plan.unbuildable ?? []).map(u => u.name);
    parts.push(
      trans._n(
        '%2 did not come back and cannot be rebuilt.',
        '%2 did not come back and cannot be rebuilt.',
        names.length,
        namesText(names, trans)
      )
    );
  }
  parts.push(unbuildableText(plan, trans));
  return parts.filter(Boolean).join(' ');
}

/**
 * The cells of a plan, one per line with its first line of code:
 * "[3] model = {'w': 0}" — the tooltip of the "Re-run cells" button.
 */
export function cellLines(plan: IRebuildPlan): string {
  return plan.cells
    .map(c => (c.code ? `${cellLabel(c)} ${c.code}` : cellLabel(c)))
    .join('\n');
}

/**
 * The toast of a rebuild that ran: "Rebuilt `batches`, `h` in train.ipynb
 * (re-ran cells [3], [4], [5] in 0.01 s)." `auto` when the server ran it
 * by itself (its `rebuild = "auto"` setting).
 */
export function rebuiltText(
  path: string,
  detail: IRebuiltDetail,
  trans: TranslationBundle,
  auto = false
): string {
  const names = namesText(detail.names ?? [], trans);
  const cells = cellsText(detail.cells ?? [], trans);
  const seconds = detail.seconds;
  const how =
    typeof seconds === 'number' && isFinite(seconds)
      ? trans.__('re-ran %1 in %2', cells, tookText(seconds, trans))
      : trans.__('re-ran %1', cells);
  return auto
    ? trans.__('Rebuilt %1 in %2 automatically (%3).', names, path, how)
    : trans.__('Rebuilt %1 in %2 (%3).', names, path, how);
}

/**
 * The toast of a rebuild that did not complete. What is safe comes first
 * (a toast may cut the rest): a failing cell changed nothing; a rebuild
 * that needs confirming ran nothing. Then the cell and its error, or what
 * the cells would share and why.
 */
export function rebuildFailedText(
  path: string,
  detail: IRebuildFailedDetail,
  trans: TranslationBundle
): string {
  const failed = detail.failed;
  if (detail.error_reason === 'cell-failed' && failed) {
    const code = clip((failed.code ?? '').trim(), MAX_CODE);
    const cell = code
      ? trans.__('cell %1 `%2`', cellLabel(failed), code)
      : trans.__('cell %1', cellLabel(failed));
    const error = sentence(clip(failed.error ?? '', MAX_ERROR));
    return error
      ? trans.__(
          'Rebuild in %1 changed nothing: %2 failed with %3',
          path,
          cell,
          error
        )
      : trans.__('Rebuild in %1 changed nothing: %2 failed.', path, cell);
  }
  if (detail.error_reason === 'needs-confirm') {
    const shared = detail.shared ?? [];
    const cells = detail.plan?.cells?.length
      ? cellsText(detail.plan.cells, trans)
      : trans.__('the cells');
    const what = shared.map(s => `\`${s.name}\` (${s.reason})`).join(', ');
    return trans.__(
      'Rebuild in %1 ran nothing: re-running %2 could change what was restored: %3.',
      path,
      cells,
      what || trans.__('objects that cannot be copied')
    );
  }
  return trans.__(
    'Rebuild in %1 failed: %2',
    path,
    sentence(detail.message ?? detail.error_reason ?? '')
  );
}

/**
 * A text cut to `max` characters, with an ellipsis when cut.
 */
function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
