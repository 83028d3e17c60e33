/**
 * jsdom, plus what Node gives every program and jsdom leaves out: the Fetch
 * API's Response, Request and Headers (the REST client reads Responses), and
 * DragEvent, which Lumino's drag-and-drop module subclasses when it loads.
 */
const { TestEnvironment } = require('jest-environment-jsdom');

class JsdomWithFetch extends TestEnvironment {
  constructor(config, context) {
    super(config, context);
    Object.assign(this.global, { Response, Request, Headers });
    if (!this.global.DragEvent) {
      this.global.DragEvent = class DragEvent extends this.global.MouseEvent {};
    }
  }
}

module.exports = JsdomWithFetch;
