/* steadystream glass probe (steadystream.glass/1): when each token reached the page, and when
 * it reached the glass. No dependencies; a classic script that defines `SteadystreamGlass`.
 *
 *   const probe = SteadystreamGlass.start({ streamId, report: BASE + "/steadystream/glass" });
 *   const response = await fetch(...);       // start() just before: times count from here
 *   probe.firstByte(response);                // the response's headers are in (and its token)
 *   probe.arrived(1);                         // each token (or delta) the reader yields
 *   probe.shown(1);                           // right after the DOM update that shows it
 *   await probe.finish("complete");           // after the last token: waits a frame, posts
 *
 * A token's paint is the animation frame after the DOM update that showed it: the frame's
 * time (requestAnimationFrame's timestamp), never earlier than the update itself. Tokens
 * shown between two frames are painted together: one frame, several tokens.
 *
 * Nothing the user reads leaves the page: the report carries times and token counts only,
 * unless the page passes `keepText: true` and the text to `arrived(n, text)`. Bounded: at most
 * `maxEvents` arrivals and frames (20,000 by default); beyond that the probe stops recording
 * and says so in the labels (`truncated_probe`).
 *
 * A gateway takes a report only with the token its answer carried (the response header
 * X-Steadystream-Glass-Token, one report per answer): firstByte(response) keeps it, and the
 * stream id from X-Request-Id when none was given; `token` in the options sets it outright.
 */
(function (root) {
  "use strict";
  var SCHEMA = "steadystream.glass/1";
  var TOKEN_HEADER = "x-steadystream-glass-token";
  var now = function () { return performance.now(); };

  function Probe(options) {
    this.streamId = String(options.streamId || "");
    this.report = options.report || null;
    this.labels = Object.assign({}, options.labels || {});
    this.keepText = options.keepText === true;
    this.headers = Object.assign({}, options.headers || {});
    this.token = options.token ? String(options.token) : null;
    this.maxEvents = options.maxEvents || 20000;
    this.t0 = now();
    this.startedAt = Date.now() / 1000;
    this.arrivals = [];
    this.frames = [];
    this.texts = this.keepText ? [] : null;
    this.firstByteMs = null;
    this.pending = 0;
    this.lastShown = 0;
    this.frameRequested = false;
    this.frameWaiters = [];
    var self = this;
    this.onFrame = function (stamp) { self._paint(stamp); };
  }

  Probe.prototype._ms = function (t) { return Math.max(0, t - this.t0); };

  Probe.prototype.firstByte = function (response) {
    if (this.firstByteMs === null) this.firstByteMs = this._ms(now());
    var headers = response && response.headers;
    if (headers && typeof headers.get === "function") {
      var token = headers.get(TOKEN_HEADER);
      if (token) this.token = token;
      if (!this.streamId) this.streamId = headers.get("x-request-id") || "";
    }
  };

  Probe.prototype.arrived = function (tokens, text) {
    if (this.arrivals.length >= this.maxEvents) { this.labels.truncated_probe = "1"; return; }
    this.arrivals.push([this._ms(now()), tokens || 1]);
    if (this.texts !== null) this.texts.push(text === undefined ? "" : String(text));
  };

  Probe.prototype.shown = function (tokens) {
    this.pending += tokens || 1;
    this.lastShown = now();
    if (!this.frameRequested) {
      this.frameRequested = true;
      requestAnimationFrame(this.onFrame);
    }
  };

  Probe.prototype._paint = function (stamp) {
    this.frameRequested = false;
    if (this.pending > 0) {
      if (this.frames.length < this.maxEvents) {
        this.frames.push([this._ms(Math.max(stamp, this.lastShown)), this.pending]);
      } else {
        this.labels.truncated_probe = "1";
      }
      this.pending = 0;
    }
    var waiters = this.frameWaiters;
    this.frameWaiters = [];
    for (var i = 0; i < waiters.length; i++) waiters[i]();
  };

  /* The report as posted (also handy for a page that sends it elsewhere itself). */
  Probe.prototype.toJSON = function (outcome) {
    return {
      schema: SCHEMA,
      stream_id: this.streamId,
      started_at: this.startedAt,
      labels: this.labels,
      outcome: outcome || "complete",
      first_byte_ms: this.firstByteMs,
      end_ms: this.endMs === undefined ? null : this.endMs,
      arrivals: this.arrivals,
      frames: this.frames,
      texts: this.texts,
    };
  };

  /* Wait for the frame that paints what was shown last, then post the report. */
  Probe.prototype.finish = function (outcome) {
    var self = this;
    this.endMs = this._ms(now());
    var painted = this.pending === 0 ? Promise.resolve() : new Promise(function (resolve) {
      self.frameWaiters.push(resolve);
      if (!self.frameRequested) { self.frameRequested = true; requestAnimationFrame(self.onFrame); }
    });
    return painted.then(function () {
      var body = JSON.stringify(self.toJSON(outcome));
      if (!self.report) return body;
      var headers = Object.assign({ "content-type": "application/json" }, self.headers);
      if (self.token) headers[TOKEN_HEADER] = self.token;
      return fetch(self.report, { method: "POST", headers: headers, body: body, keepalive: body.length < 60000 })
        .then(function (r) {
          if (!r.ok) return r.text().then(function (t) { throw new Error("glass report refused: " + r.status + " " + t); });
          return body;
        });
    });
  };

  root.SteadystreamGlass = {
    schema: SCHEMA,
    start: function (options) { return new Probe(options || {}); },
  };
})(typeof globalThis !== "undefined" ? globalThis : this);
