/* A minimal chat page with two renderers, measured at the glass by the steadystream probe.
 *
 *   naive:  every token is appended the moment the reader yields it, so the screen shows
 *           the network's rhythm: bursts land in one frame, stalls show as freezes.
 *   smooth: tokens go into a buffer and are revealed one at a time at a steady pace, at
 *           most every ~33 ms, faster when the buffer holds more than the start-up hold
 *           (250 ms) so it never falls far behind. The hold fills the buffer: jitter and
 *           stalls shorter than it vanish at the glass, at the price of a later first token.
 *
 * Query: ?api=ORIGIN (default: this page's origin) &renderer=naive|smooth &model=NAME
 *        &max_tokens=N (the answer's length cap; default: the server's)
 *        &hold=MS (smooth's start-up hold and buffer target, default 250)
 *        &tick=MS (smooth's slowest reveal interval, default 33)
 * For the glass harness the page exposes window.steadystreamAsk({prompt, requestId}),
 * which resolves once the probe's report is posted.
 *
 * A reload mid-answer does not lose the answer: while a stream runs, the page keeps its id
 * (the gateway's X-Steadystream-Stream-Id), the last event id and the text so far in
 * sessionStorage; a reloaded page shows that text and asks the gateway for the rest
 * (GET /v1/streams/{id} with Last-Event-ID), so the answer goes on where it stopped, no
 * text twice (docs/gateway.md, "Resume"). window.steadystreamResumed resolves with the
 * resumed answer's {tokens, outcome}, or null when there was nothing to resume.
 */
(function () {
  "use strict";
  var params = new URLSearchParams(location.search);
  var api = (params.get("api") || location.origin).replace(/\/+$/, "");
  var rendererName = params.get("renderer") === "smooth" ? "smooth" : "naive";
  var model = params.get("model") || "replay";
  var holdMs = Number(params.get("hold") || 250);
  var tickMs = Number(params.get("tick") || 33);
  var maxTokens = Number(params.get("max_tokens") || 0);
  var answer = document.getElementById("answer");
  var status = document.getElementById("status");
  document.getElementById("renderer-name").textContent = "(" + rendererName + " renderer)";

  function naive(probe) {
    return {
      push: function (text) {
        answer.append(text);
        probe.shown(1);
      },
      end: function () { return Promise.resolve(); },
    };
  }

  function smooth(probe) {
    // Tokens wait in a buffer and are revealed one at a time, on animation frames, at most
    // every `tick` ms (33 ms: 30 tokens/s); when the buffer holds more than `hold` ms of
    // reveals, the interval shrinks to hold / buffered, so the buffer settles near `hold`
    // whatever the stream's rate and the reveal never falls far behind.
    var queue = [];
    var started = false;
    var ended = false;
    var nextAt = 0;
    var done;
    var finished = new Promise(function (resolve) { done = resolve; });
    function frame(now) {
      if (queue.length === 0) {
        nextAt = Math.max(nextAt, now);  // an empty buffer banks no reveals for later
        if (ended) { done(); return; }
      }
      var n = 0;
      while (n < queue.length && now >= nextAt) {
        nextAt += Math.min(tickMs, Math.max(1, holdMs / (queue.length - n)));
        n += 1;
      }
      if (n > 0) {
        answer.append(queue.splice(0, n).join(""));
        probe.shown(n);
      }
      requestAnimationFrame(frame);
    }
    function start() {
      if (started) return;
      started = true;
      nextAt = performance.now();
      requestAnimationFrame(frame);
    }
    return {
      push: function (text) {
        queue.push(text);
        if (!started && queue.length === 1) setTimeout(start, holdMs);
      },
      end: function () {
        ended = true;
        start();
        return finished;
      },
    };
  }

  function loadProbe() {
    return new Promise(function (resolve, reject) {
      var script = document.createElement("script");
      script.src = api + "/steadystream/glass.js";
      script.onload = resolve;
      script.onerror = function () { reject(new Error("no glass probe at " + script.src)); };
      document.head.append(script);
    });
  }

  /* Server-sent events, by the spec's line rules, from a fetch body: {data, id}, where id
   * is the last event id in force (null until the stream sets one). */
  async function* sseEvents(body) {
    var reader = body.pipeThrough(new TextDecoderStream()).getReader();
    var buffer = "";
    var data = [];
    var id = null;
    for (;;) {
      var read = await reader.read();
      if (read.done) return;
      buffer += read.value;
      var lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();
      for (var i = 0; i < lines.length; i++) {
        var line = lines[i];
        if (line === "") {
          if (data.length) yield { data: data.join("\n"), id: id };
          data = [];
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        } else if (line.startsWith("id:")) {
          var value = line.slice(line.startsWith("id: ") ? 4 : 3);
          if (value.indexOf("\0") < 0) id = value;
        }
      }
    }
  }

  /* What a reload needs to go on: the stream's id, the last event id and the text shown. */
  var KEPT = "steadystream.chat.stream";
  function kept() {
    try { return JSON.parse(sessionStorage.getItem(KEPT) || "null"); } catch (e) { return null; }
  }
  function keep(stream) {
    try { sessionStorage.setItem(KEPT, JSON.stringify(stream)); } catch (e) { /* full: go on */ }
  }
  function forget() { sessionStorage.removeItem(KEPT); }

  /* Read an answer's events into the renderer; returns its outcome and token count. A
   * stream the gateway named is kept after every event, so a reload can resume it. */
  async function consume(response, renderer, probe, stream) {
    var outcome = "truncated";
    var tokens = 0;
    for await (var event of sseEvents(response.body)) {
      if (event.data === "[DONE]") { outcome = "complete"; break; }
      var chunk = JSON.parse(event.data);
      if (chunk.error) { outcome = "error"; break; }
      var choice = chunk.choices && chunk.choices[0];
      var text = choice && choice.delta && choice.delta.content;
      if (text) {
        probe.arrived(1);
        tokens += 1;
        renderer.push(text);
        if (stream) stream.text += text;
      }
      if (stream && event.id !== null) {
        stream.last = event.id;
        keep(stream);
      }
    }
    return { tokens: tokens, outcome: outcome };
  }

  async function ask(options) {
    var requestId = options.requestId || "page-" + Date.now();
    answer.textContent = "";
    var probe = SteadystreamGlass.start({
      streamId: requestId,
      report: api + "/steadystream/glass",
      labels: { renderer: rendererName },
      headers: options.headers || {},
    });
    var renderer = rendererName === "smooth" ? smooth(probe) : naive(probe);
    var outcome = "truncated";
    var tokens = 0;
    forget();
    try {
      var response = await fetch(api + "/v1/chat/completions", {
        method: "POST",
        headers: Object.assign(
          { "content-type": "application/json", "x-request-id": requestId },
          options.headers || {}
        ),
        body: JSON.stringify(Object.assign({
          model: model,
          stream: true,
          messages: [{ role: "user", content: options.prompt || "Hello" }],
        }, maxTokens > 0 ? { max_tokens: maxTokens } : {})),
      });
      probe.firstByte(response);  // and the answer's glass token, for a gateway
      if (!response.ok) throw new Error("HTTP " + response.status + ": " + (await response.text()));
      var streamId = response.headers.get("x-steadystream-stream-id");
      var stream = streamId ? { id: streamId, last: null, text: "" } : null;
      var read = await consume(response, renderer, probe, stream);
      outcome = read.outcome;
      tokens = read.tokens;
    } catch (error) {
      outcome = "error";
      status.textContent = String(error);
    }
    forget();
    await renderer.end();
    await probe.finish(outcome);
    status.textContent = tokens + " tokens, " + outcome;
    return { tokens: tokens, outcome: outcome };
  }

  /* A stream a reload cut short: show what was shown, then ask the gateway for the rest. */
  async function resume(stream) {
    answer.textContent = stream.text;
    status.textContent = "resuming the answer…";
    var quiet = { arrived: function () {}, shown: function () {} };
    var renderer = naive(quiet);
    var result = { tokens: 0, outcome: "error" };
    try {
      var headers = stream.last !== null ? { "last-event-id": stream.last } : {};
      var response = await fetch(api + "/v1/streams/" + encodeURIComponent(stream.id), {
        headers: headers,
      });
      if (!response.ok) throw new Error("HTTP " + response.status + ": " + (await response.text()));
      result = await consume(response, renderer, quiet, stream);
    } catch (error) {
      status.textContent = "could not resume: " + String(error);
      forget();
      return result;
    }
    forget();
    status.textContent = result.tokens + " more tokens after the reload, " + result.outcome;
    return result;
  }

  var unfinished = kept();
  window.steadystreamResumed = unfinished && unfinished.id ? resume(unfinished) : Promise.resolve(null);

  window.steadystreamAsk = null;
  loadProbe().then(function () {
    window.steadystreamAsk = ask;
    if (!unfinished) status.textContent = "ready (" + api + ")";
  }, function (error) { status.textContent = String(error); });

  document.getElementById("ask").addEventListener("submit", function (event) {
    event.preventDefault();
    if (window.steadystreamAsk) window.steadystreamAsk({ prompt: document.getElementById("prompt").value });
  });
})();
