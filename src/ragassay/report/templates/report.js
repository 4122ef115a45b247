(function () {
  "use strict";
  // The per-query table is drawn from the JSON in #q-data, one page of rows at a time; a query's details
  // are built when it is opened. Every piece of data goes into the page as text (textContent), never markup.
  var table = document.getElementById("queries");
  var source = document.getElementById("q-data");
  if (!table || !source) { return; }
  // Raw DEFLATE (RFC 1951) inflater: a large set's data is compressed in the page, and decoding it here,
  // synchronously, keeps the page working in any browser and its table drawn before the load event.
  function inflate(src, size) {
    var out = new Uint8Array(size), op = 0, pos = 0, buf = 0, cnt = 0;
    var LBASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
    var LEXT = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
    var DBASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073,
                 4097, 6145, 8193, 12289, 16385, 24577];
    var DEXT = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];
    var ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
    function bits(n) {
      while (cnt < n) { buf |= (src[pos++] | 0) << cnt; cnt += 8; }
      var v = buf & ((1 << n) - 1);
      buf >>>= n; cnt -= n;
      return v;
    }
    // canonical Huffman code -> lookup table indexed by the next `max` bits (codes arrive bit-reversed)
    function table(lens) {
      var max = 0, i, len;
      for (i = 0; i < lens.length; i++) { if (lens[i] > max) { max = lens[i]; } }
      var count = new Int32Array(16), next = new Int32Array(16), t = new Int32Array(1 << max);
      for (i = 0; i < lens.length; i++) { count[lens[i]]++; }
      count[0] = 0;
      for (len = 1, i = 0; len < 16; len++) { i = (i + count[len - 1]) << 1; next[len] = i; }
      for (var sym = 0; sym < lens.length; sym++) {
        len = lens[sym];
        if (!len) { continue; }
        var code = next[len]++, rev = 0;
        for (i = 0; i < len; i++) { rev = (rev << 1) | ((code >> i) & 1); }
        for (i = rev; i < t.length; i += 1 << len) { t[i] = (sym << 4) | len; }
      }
      return {t: t, max: max, mask: (1 << max) - 1};
    }
    function sym(h) {
      while (cnt < h.max) { buf |= (src[pos++] | 0) << cnt; cnt += 8; }
      var e = h.t[buf & h.mask], n = e & 15;
      buf >>>= n; cnt -= n;
      return e >> 4;
    }
    var fixedL = [], fixedD = [], i;
    for (i = 0; i < 288; i++) { fixedL.push(i < 144 ? 8 : i < 256 ? 9 : i < 280 ? 7 : 8); }
    for (i = 0; i < 30; i++) { fixedD.push(5); }
    var last = 0;
    while (!last) {
      last = bits(1);
      var type = bits(2), lit, dist;
      if (type === 0) {
        bits(cnt & 7);  // to a byte boundary
        var n = bits(16);
        bits(16);
        while (n > 0 && cnt >= 8) { out[op++] = bits(8); n--; }
        out.set(src.subarray(pos, pos + n), op); op += n; pos += n;
        continue;
      }
      if (type === 1) {
        lit = table(fixedL); dist = table(fixedD);
      } else {
        var hlit = bits(5) + 257, hdist = bits(5) + 1, hclen = bits(4) + 4, cl = new Array(19).fill(0);
        for (i = 0; i < hclen; i++) { cl[ORDER[i]] = bits(3); }
        var clt = table(cl), lens = [];
        while (lens.length < hlit + hdist) {
          var s = sym(clt);
          if (s < 16) { lens.push(s); continue; }
          var rep = s === 16 ? 3 + bits(2) : s === 17 ? 3 + bits(3) : 11 + bits(7);
          var v = s === 16 ? lens[lens.length - 1] : 0;
          while (rep--) { lens.push(v); }
        }
        lit = table(lens.slice(0, hlit)); dist = table(lens.slice(hlit));
      }
      for (;;) {
        var c = sym(lit);
        if (c < 256) { out[op++] = c; continue; }
        if (c === 256) { break; }
        c -= 257;
        var length = LBASE[c] + bits(LEXT[c]);
        var d = sym(dist), back = DBASE[d] + bits(DEXT[d]);
        for (var k = 0; k < length; k++) { out[op] = out[op - back]; op++; }
      }
    }
    return out;
  }

  var D;
  if (source.getAttribute("data-encoding") === "deflate-base64") {
    var bin = atob(source.textContent.trim()), packed = new Uint8Array(bin.length);
    for (var b = 0; b < bin.length; b++) { packed[b] = bin.charCodeAt(b); }
    D = JSON.parse(new TextDecoder("utf-8").decode(inflate(packed, Number(source.getAttribute("data-length")))));
  } else {
    D = JSON.parse(source.textContent);
  }
  var N = D.id.length;
  // repeated strings travel as codes into small tables; expand them once
  D.runs.forEach(function (r) { r.outcome = r.outcome.map(function (c) { return c === null ? null : D.outcomes[c]; }); });
  D.worst.baseline = D.worst.pair.map(function (c) { return c === null ? null : D.worst.pairs[c][0]; });
  D.worst.candidate = D.worst.pair.map(function (c) { return c === null ? null : D.worst.pairs[c][1]; });
  var OUTCOMES = ["answered", "abstained", "refused", "error"];
  var count = document.getElementById("q-count");
  var filter = document.getElementById("q-filter");
  var stratum = document.getElementById("q-stratum");
  var pageLabel = document.getElementById("q-page");
  var prev = document.getElementById("q-prev");
  var next = document.getElementById("q-next");
  var headers = Array.prototype.slice.call(table.tHead.querySelectorAll("th[data-col]"));

  function starts(col) {  // where each query's units begin in a {n, span, grade} list
    var s = new Int32Array(N + 1);
    for (var i = 0; i < N; i++) { s[i + 1] = s[i] + col.n[i]; }
    return s;
  }
  var evStart = starts(D.evidence);
  var retStart = D.runs.map(function (r) { return starts(r.retrieved); });
  var all = new Int32Array(N);
  for (var i = 0; i < N; i++) { all[i] = i; }
  var view = all;     // the queries shown, in the current order
  var order = all;    // every query, in the current order
  var page = 0;
  var haystack = null;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function num(v) { return v === null || v === undefined ? "undefined" : (Number.isInteger(v) && Math.abs(v) >= 1000 ? String(v) : v.toFixed(3)); }
  function signed(v) {
    if (v === null || v === undefined) { return "undefined"; }
    var s = v.toFixed(3);
    if (parseFloat(s) === 0) { return s.replace("-", ""); }
    return v < 0 ? "\u2212" + s.slice(1) : "+" + s;
  }
  function anchor(i) { return D.anchor[i] || "q-" + D.id[i]; }
  function answerable(i) { var a = D.answerable[i]; return a === null ? "\u2014" : (a ? "yes" : "no"); }
  function spanText(s) { return D.spans.start[s] === null || D.spans.end[s] === null ? "" : D.spans.start[s] + "\u2013" + D.spans.end[s]; }

  // cell text and sort key of column c for query i
  function cell(c, i) {
    var k = D.columns[c];
    if (k[0] === "id") { return [D.id[i], D.id[i]]; }
    if (k[0] === "stratum") { var s = D.strata[D.stratum[i]]; return [s, s]; }
    if (k[0] === "answerable") { var a = answerable(i); return [a, a]; }
    var r = D.runs[k[1]];
    if (k[0] === "outcome") { var o = r.outcome[i]; return [r.present[i] && o !== null ? o : "\u2014", o || ""]; }
    if (k[0] === "metric") {
      var col = r.metrics[k[2]];
      var v = col ? col[i] : null;
      return [r.present[i] ? num(v) : "\u2014", v === null || v === undefined ? NaN : v];
    }
    var d = D.worst.delta[i];
    return [d === null ? "\u2014" : signed(d), d === null ? NaN : d];
  }

  function row(i) {
    var body = el("tbody", "q");
    body.id = anchor(i);
    body.setAttribute("data-stratum", D.strata[D.stratum[i]]);
    body.setAttribute("data-i", i);
    var tr = el("tr", "qrow");
    for (var c = 0; c < D.columns.length; c++) {
      var k = D.columns[c][0], kv = cell(c, i);
      var td = el("td", null, c === 1 ? null : kv[0]);
      if (c === 0) { td.className = "mono"; }
      if (c === 1) { td.appendChild(el("span", "stratum-tag", kv[0])); }
      if (k === "outcome") { td.className = OUTCOMES.indexOf(kv[1]) >= 0 ? "outcome outcome-" + kv[1] : "outcome"; }
      if (k === "metric" || k === "worst") {
        td.className = "num" + (kv[0] === "undefined" ? " undefined" : "");
        if (k === "worst" && D.worst.delta[i] !== null) {
          td.title = D.worst.metric + " " + D.worst.baseline[i] + " \u2192 " + D.worst.candidate[i];
        }
      }
      td.setAttribute("data-v", typeof kv[1] === "number" && isNaN(kv[1]) ? "" : kv[1]);
      tr.appendChild(td);
    }
    body.appendChild(tr);
    var dr = el("tr", "qdetail"), dtd = el("td");
    dtd.colSpan = D.columns.length;
    var det = el("details"), sum = el("summary");
    sum.appendChild(el("span", "question-snippet", D.question[i] || "(no question text)"));
    det.appendChild(sum);
    det.addEventListener("toggle", function () {
      if (det.open && det.childNodes.length === 1) { det.appendChild(detail(i)); }
    });
    dtd.appendChild(det);
    dr.appendChild(dtd);
    body.appendChild(dr);
    return body;
  }

  function unitText(s, evidence) {
    // marks the characters inside an evidence span of the same document, when the text is the exact slice
    var box = el("div", "unit-text"), text = D.spans.text[s] || "", start = D.spans.start[s];
    var mask = new Uint8Array(text.length);
    if (D.spans.exact[s] && start !== null) {
      evidence.forEach(function (e) {
        if (D.spans.doc_id[e] !== D.spans.doc_id[s] || D.spans.start[e] === null) { return; }
        var lo = Math.max(D.spans.start[e], start) - start, hi = Math.min(D.spans.end[e], start + text.length) - start;
        for (var j = Math.max(lo, 0); j < hi; j++) { mask[j] = 1; }
      });
    }
    var a = 0;
    for (var b = 1; b <= text.length; b++) {
      if (b === text.length || mask[b] !== mask[a]) {
        var piece = text.slice(a, b);
        box.appendChild(mask[a] ? el("mark", null, piece) : document.createTextNode(piece));
        a = b;
      }
    }
    if (D.spans.cut[s]) { box.appendChild(document.createTextNode("\u2026")); }
    return box;
  }
  function overlapsEvidence(s, evidence) {
    return evidence.some(function (e) {
      return D.spans.doc_id[e] === D.spans.doc_id[s] && D.spans.start[e] !== null && D.spans.start[s] !== null &&
        D.spans.start[e] < D.spans.end[s] && D.spans.start[s] < D.spans.end[e];
    });
  }

  function detail(i) {
    var box = el("div", "detail-body");
    var q = el("p", "question");
    q.appendChild(el("strong", null, "Question."));
    q.appendChild(document.createTextNode(" " + (D.question[i] || "") + " "));
    q.appendChild(el("span", "note", "(answerable: " + answerable(i) + ")"));
    box.appendChild(q);
    box.appendChild(el("h4", null, "Evidence"));
    var evidence = [];
    for (var e = evStart[i]; e < evStart[i + 1]; e++) { evidence.push(D.evidence.span[e]); }
    if (evidence.length) {
      var ul = el("ul", "evidence");
      evidence.forEach(function (s, j) {
        var li = el("li");
        li.appendChild(el("span", "src mono", D.spans.doc_id[s] + " " + spanText(s)));
        li.appendChild(document.createTextNode(" "));
        li.appendChild(el("span", "grade", "grade " + D.evidence.grade[evStart[i] + j]));
        li.appendChild(el("blockquote", null, (D.spans.text[s] || "") + (D.spans.cut[s] ? "\u2026" : "")));
        ul.appendChild(li);
      });
      box.appendChild(ul);
    } else {
      box.appendChild(el("p", "note", "No evidence: this query is unanswerable from the corpus."));
    }
    var runs = el("div", "run-details");
    D.runs.forEach(function (r, k) {
      if (!r.present[i]) { return; }
      var d = el("div", "run-detail"), h = el("h4");
      h.appendChild(el("span", "run-chip", r.name));
      var o = r.outcome[i];
      if (o) { h.appendChild(document.createTextNode(" ")); h.appendChild(el("span", "outcome outcome-" + (OUTCOMES.indexOf(o) >= 0 ? o : "other"), o)); }
      d.appendChild(h);
      var names = Object.keys(r.metrics);
      if (names.length) {
        var p = el("p", "metrics");
        names.forEach(function (m) {
          var s = el("span", "metric");
          s.appendChild(el("span", "mono", m));
          s.appendChild(document.createTextNode(" " + num(r.metrics[m][i])));
          p.appendChild(s);
        });
        d.appendChild(p);
      }
      var ans = el("p", "answer");
      ans.appendChild(el("strong", null, "Answer."));
      ans.appendChild(document.createTextNode(" "));
      if (r.answer[i] === null) { ans.appendChild(el("span", "note", "none")); } else { ans.appendChild(document.createTextNode(r.answer[i])); }
      d.appendChild(ans);
      var a = retStart[k][i], b = retStart[k][i + 1];
      if (b > a) {
        var ol = el("ol", "retrieved");
        for (var u = a; u < b; u++) {
          var s = r.retrieved.span[u], g = r.retrieved.grade[u];
          var hit = g === null ? overlapsEvidence(s, evidence) : g > 0;
          var li = el("li", hit ? "hit" : "miss");
          li.appendChild(el("span", "src mono", "#" + (u - a + 1) + " " + D.spans.doc_id[s] + " " + spanText(s)));
          li.appendChild(document.createTextNode(" "));
          li.appendChild(el("span", "grade", g === null ? "unjudged" : "grade " + g.toFixed(1)));
          if (hit) { li.appendChild(document.createTextNode(" ")); li.appendChild(el("span", "hit-tag", "evidence")); }
          if (D.spans.text[s]) { li.appendChild(unitText(s, evidence)); }
          ol.appendChild(li);
        }
        d.appendChild(ol);
      }
      runs.appendChild(d);
    });
    box.appendChild(runs);
    return box;
  }

  function render() {
    var size = D.page_size, pages = Math.max(1, Math.ceil(view.length / size));
    page = Math.min(Math.max(page, 0), pages - 1);
    while (table.tBodies.length) { table.removeChild(table.tBodies[0]); }
    var frag = document.createDocumentFragment();
    var end = Math.min(view.length, (page + 1) * size);
    for (var p = page * size; p < end; p++) { frag.appendChild(row(view[p])); }
    table.appendChild(frag);
    count.textContent = view.length === N ? N + " queries" : view.length + " of " + N + " queries";
    pageLabel.textContent = view.length ? "rows " + (page * size + 1) + "\u2013" + end + " of " + view.length : "no rows";
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
  }

  function sortBy(th) {
    var c = parseInt(th.getAttribute("data-col"), 10);
    var numeric = th.getAttribute("data-type") === "num";
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    headers.forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
    var keys = numeric ? new Float64Array(N) : new Array(N);
    for (var i = 0; i < N; i++) { var k = cell(c, i)[1]; keys[i] = numeric ? k : String(k).toLowerCase(); }
    var idx = Array.prototype.slice.call(all);
    idx.sort(function (x, y) {
      var a = keys[x], b = keys[y];
      if (numeric) {
        var an = isNaN(a), bn = isNaN(b);
        if (an || bn) { return an === bn ? x - y : (an ? 1 : -1); }  // undefined always last
      }
      if (a < b) { return -dir; }
      if (a > b) { return dir; }
      return x - y;
    });
    order = Int32Array.from(idx);
    applyFilter(false);
  }

  function text(i) {
    var parts = [D.id[i], D.strata[D.stratum[i]], D.question[i] || ""];
    for (var e = evStart[i]; e < evStart[i + 1]; e++) { parts.push(D.spans.text[D.evidence.span[e]] || ""); }
    D.runs.forEach(function (r) { if (r.answer[i]) { parts.push(r.answer[i]); } });
    return parts.join("\n").toLowerCase();
  }
  function applyFilter(keepPage) {  // keepPage: stay on the page shown (false goes back to the first)
    var t = (filter.value || "").trim().toLowerCase(), s = stratum.value;
    if (!t && !s) { view = order; } else {
      if (t && !haystack) { haystack = new Array(N); for (var i = 0; i < N; i++) { haystack[i] = text(i); } }
      var out = [];
      for (var j = 0; j < order.length; j++) {
        var q = order[j];
        if ((!s || D.strata[D.stratum[q]] === s) && (!t || haystack[q].indexOf(t) !== -1)) { out.push(q); }
      }
      view = out;
    }
    if (!keepPage) { page = 0; }
    render();
  }

  function openTarget() {
    var id = decodeURIComponent((location.hash || "").slice(1));
    if (!id) { return; }
    var i = -1;
    for (var q = 0; q < N; q++) { if (anchor(q) === id) { i = q; break; } }
    if (i < 0) { return; }
    var at = Array.prototype.indexOf.call(view, i);
    if (at < 0) { filter.value = ""; stratum.value = ""; view = order; at = Array.prototype.indexOf.call(view, i); }
    page = Math.floor(at / D.page_size);
    render();
    var body = document.getElementById(id);
    var det = body.querySelector("details");
    det.open = true;
    if (det.childNodes.length === 1) { det.appendChild(detail(i)); }
    body.scrollIntoView({block: "start"});
  }

  headers.forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(th); }
    });
  });
  filter.addEventListener("input", function () { applyFilter(false); });
  stratum.addEventListener("change", function () { applyFilter(false); });
  prev.addEventListener("click", function () { page -= 1; render(); });
  next.addEventListener("click", function () { page += 1; render(); });
  window.addEventListener("hashchange", openTarget);
  render();
  openTarget();
  table.setAttribute("data-ready", "1");
})();
