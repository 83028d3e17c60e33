/**
 * The sentences of a rebuild as a user reads them: what the resume did not
 * bring back and exactly which cells would run, before anything runs; what
 * a rebuild did; and, when it stopped, that nothing was changed.
 */
import { resumedText } from '../session/text';
import {
  cellLines,
  cellsText,
  namesText,
  offerText,
  planSecondsText,
  rebuildFailedText,
  rebuiltText
} from '../rebuild/text';
import { IEvent, IRebuildPlan } from '../tokens';
import { trans } from './translation';

/** The demo's plan, as the server sends it after a resume. */
const PLAN: IRebuildPlan = {
  names: ['batches', 'h'],
  cells: [
    { execution_count: 3, seconds: 0.001, code: "model = {'w': 0}" },
    {
      execution_count: 4,
      seconds: 0.002,
      code: 'batches = (data[i:i + 10] for i in range(0, 100, 10))'
    },
    { execution_count: 5, seconds: 0.0, code: "h = hashlib.sha256(b'abc')" }
  ],
  seconds: 0.003,
  unbuildable: [],
  text: '`batches`, `h`: re-run cells [3], [4], [5] — 0.0 s',
  problem: null
};

describe('rebuild texts', () => {
  it('offers the plan: what was not saved, which cells, how long', () => {
    expect(offerText(PLAN, [], trans)).toBe(
      '`batches`, `h` were not saved. Re-run cells [3], [4], [5] (0.0 s) to rebuild them.'
    );
  });

  it('tells one name and one cell in the singular, and an unknown run time', () => {
    const plan: IRebuildPlan = {
      ...PLAN,
      names: ['h'],
      cells: [{ execution_count: 2, seconds: null, code: 'h = 1' }],
      seconds: null
    };
    expect(offerText(plan, [], trans)).toBe(
      '`h` was not saved. Re-run cell [2] (run time unknown) to rebuild it.'
    );
  });

  it('tells a failed restore from a skipped save, and lists what cannot be rebuilt with why', () => {
    const plan: IRebuildPlan = {
      ...PLAN,
      unbuildable: [
        { name: 'g1', reason: 'its cell is marked gp-no-rerun' },
        { name: 'g2', reason: 'no recorded cell makes it' }
      ]
    };
    expect(offerText(plan, ['h'], trans)).toBe(
      '`batches` was not saved. `h` could not be restored. ' +
        'Re-run cells [3], [4], [5] (0.0 s) to rebuild them. ' +
        'Cannot rebuild `g1`: its cell is marked gp-no-rerun; `g2`: no recorded cell makes it.'
    );
  });

  it('says what cannot come back when nothing can be rebuilt', () => {
    const plan: IRebuildPlan = {
      names: [],
      cells: [],
      seconds: 0,
      unbuildable: [{ name: 'g', reason: 'the checkpoint has no cell log' }],
      text: null,
      problem: null
    };
    expect(offerText(plan, [], trans)).toBe(
      '`g` did not come back and cannot be rebuilt. Cannot rebuild `g`: the checkpoint has no cell log.'
    );
  });

  it('keeps long lists short: the first names and cells, then how many more', () => {
    expect(namesText(['a', 'b', 'c', 'd', 'e', 'f'], trans)).toBe(
      '`a`, `b`, `c`, `d` and 2 more'
    );
    const cells = [1, 2, 3, 4, 5, 6, 7, 8].map(n => ({
      execution_count: n,
      seconds: 0
    }));
    expect(cellsText(cells, trans)).toBe(
      'cells [1], [2], [3], [4], [5], [6] and 2 more'
    );
    expect(cellsText([{ execution_count: null }], trans)).toBe('cell [?]');
  });

  it('writes run times in seconds, long ones coarser', () => {
    expect(planSecondsText(0.04, trans)).toBe('0.0 s');
    expect(planSecondsText(12.46, trans)).toBe('12.5 s');
    expect(planSecondsText(600, trans)).toBe('10 min');
    expect(planSecondsText(null, trans)).toBe('run time unknown');
  });

  it('lists each cell with its first line, for the button and the panel', () => {
    expect(cellLines(PLAN)).toBe(
      "[3] model = {'w': 0}\n" +
        '[4] batches = (data[i:i + 10] for i in range(0, 100, 10))\n' +
        "[5] h = hashlib.sha256(b'abc')"
    );
  });

  it('says what a rebuild made again, and when the server did it by itself', () => {
    const detail = {
      names: ['batches', 'h'],
      cells: PLAN.cells.map(c => ({
        execution_count: c.execution_count,
        seconds: c.seconds
      })),
      seconds: 0.0123,
      copy_bytes: 800
    };
    expect(rebuiltText('train.ipynb', detail, trans)).toBe(
      'Rebuilt `batches`, `h` in train.ipynb (re-ran cells [3], [4], [5] in 0.01 s).'
    );
    expect(
      rebuiltText('train.ipynb', { ...detail, names: ['h'] }, trans, true)
    ).toBe(
      'Rebuilt `h` in train.ipynb automatically (re-ran cells [3], [4], [5] in 0.01 s).'
    );
    // A cell quicker than the clock's hundredths is not "0.00 s"
    expect(
      rebuiltText(
        'train.ipynb',
        {
          names: ['h'],
          cells: [{ execution_count: 2, seconds: 0 }],
          seconds: 0.0004
        },
        trans
      )
    ).toBe('Rebuilt `h` in train.ipynb (re-ran cell [2] in under 0.01 s).');
    expect(
      rebuiltText(
        'train.ipynb',
        { names: ['h'], cells: [], seconds: 12.34 },
        trans
      )
    ).toContain('in 12.3 s');
  });

  it('names the failing cell and its error, and says that nothing was changed first', () => {
    const text = rebuildFailedText(
      'rows.ipynb',
      {
        error_reason: 'cell-failed',
        failed: {
          execution_count: 2,
          code: "rows = (line for line in open('rows.txt'))",
          error:
            "FileNotFoundError: [Errno 2] No such file or directory: 'rows.txt'"
        }
      },
      trans
    );
    expect(text).toBe(
      "Rebuild in rows.ipynb changed nothing: cell [2] `rows = (line for line in open('rows.txt…` " +
        "failed with FileNotFoundError: [Errno 2] No such file or directory: 'rows.txt'."
    );
  });

  it('says a rebuild waiting for a yes ran nothing, and what it would share and why', () => {
    const text = rebuildFailedText(
      'train.ipynb',
      {
        error_reason: 'needs-confirm',
        shared: [
          { name: 'model', reason: 'copying it gives back the same object' }
        ],
        plan: PLAN
      },
      trans
    );
    expect(text).toBe(
      'Rebuild in train.ipynb ran nothing: re-running cells [3], [4], [5] could change what was restored: ' +
        '`model` (copying it gives back the same object).'
    );
  });

  it("gives any other failure in the server's words", () => {
    expect(
      rebuildFailedText(
        'train.ipynb',
        {
          error_reason: 'agent-error',
          message: 'the kernel did not answer'
        },
        trans
      )
    ).toBe('Rebuild in train.ipynb failed: The kernel did not answer.');
  });

  it('leaves the plan out of the resume toast: a toast of its own offers it', () => {
    const event: IEvent = {
      time: '2026-12-02T10:00:00Z',
      session_id: 's1',
      type: 'resumed',
      reason: 'user',
      detail: {
        message: `Restored 3 objects from checkpoint c1. Rebuild ${PLAN.text}`,
        rebuild: PLAN
      }
    };
    expect(resumedText('train.ipynb', event, trans)).toBe(
      'Resumed train.ipynb. Restored 3 objects from checkpoint c1.'
    );
  });
});
