/**
 * A stand-in for `@jupyterlab/apputils` (an ES module Jest does not load)
 * shared by the specs of the notifiers and commands: `Notification` records
 * the toasts it is asked for in `Notification.toasts`, `Dialog` makes the
 * buttons as plain objects, and `showDialog` is a mock each spec answers.
 *
 * Use it from a `jest.mock` factory (which may only reach other modules through `jest.requireActual`):
 * `jest.mock('@jupyterlab/apputils', () => jest.requireActual('./apputilsStub').apputilsStub());`
 */
export function apputilsStub(): Record<string, unknown> {
  const toasts: {
    id: string;
    type: string;
    message: string;
    options: any;
  }[] = [];
  let next = 0;
  const show =
    (type: string) =>
    (message: string, options: any = {}): string => {
      const id = `toast-${++next}`;
      toasts.push({ id, type, message, options });
      return id;
    };
  return {
    Notification: {
      toasts,
      info: show('info'),
      success: show('success'),
      warning: show('warning'),
      error: show('error'),
      dismiss: jest.fn(),
      update: jest.fn(),
      manager: { has: () => true }
    },
    Dialog: {
      cancelButton: (options: object) => ({ ...options, accept: false }),
      okButton: (options: object) => ({ ...options, accept: true }),
      warnButton: (options: object) => ({ ...options, accept: true })
    },
    showDialog: jest.fn()
  };
}
