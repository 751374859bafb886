// kernelmap's viewer: draws an answer's JSON document (embedded beside the
// mount point as a script element of type application/json, class km-data) as a page.
// Text from the document is only ever set with textContent, never parsed as
// HTML; the one exception is the excerpts, which the renderer produced with
// pygments (escaped) on the server side.
(function () {
  "use strict";

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function badge(text, cls, title) {
    var b = el("span", "badge " + (cls || ""), text);
    b.title = title || String(text);  // a badge cut to its row's width is whole on hover
    return b;
  }
  function us(v) {
    v = Number(v);
    if (!isFinite(v)) return "";
    if (v >= 1e6) return (v / 1e6).toFixed(2) + " s";
    if (v >= 1e3) return (v / 1e3).toFixed(2) + " ms";
    return v.toFixed(1) + " us";
  }
  function locKey(loc) {
    return (loc.origin || "") + "|" + loc.path + "|" + loc.line;
  }
  function sourceLoc(text) {
    if (typeof text !== "string") return null;
    var i = text.lastIndexOf(":");
    if (i <= 0 || !/^\d+$/.test(text.slice(i + 1))) return null;
    return { path: text.slice(0, i), line: Number(text.slice(i + 1)), end_line: null, origin: null, url: null };
  }

  function Viewer(root, data) {
    this.root = root;
    this.data = data;
    this.doc = data.document;
    this.excerpts = data.excerpts || {};
    this.links = data.links || {};
  }

  // A location: "path:line" linked to its commit-pinned URL, a link to the
  // app's source view when served, and its excerpt when embedded.
  Viewer.prototype.location = function (loc, withExcerpt) {
    var box = el("span", "loc");
    if (!loc) return box;
    var text = loc.path + ":" + loc.line + (loc.end_line && loc.end_line !== loc.line ? "-" + loc.end_line : "");
    var a;
    if (this.links.source) {
      a = el("a", "loc-src", text);
      a.href = this.links.source + "?path=" + encodeURIComponent(loc.path) + "&line=" + loc.line + (loc.origin ? "&origin=" + encodeURIComponent(loc.origin) : "") + "#L" + loc.line;
      a.dataset.kmLink = "source";
      box.appendChild(a);
    } else {
      box.appendChild(el("code", "loc-path", text));
    }
    if (loc.url && /^https:\/\//.test(loc.url)) {
      a = el("a", "loc-url", "github");
      a.href = loc.url;
      a.rel = "noreferrer noopener";
      a.target = "_blank";
      box.appendChild(a);
    }
    if (loc.origin) box.appendChild(el("span", "origin", loc.origin));
    if (withExcerpt) {
      var html = this.excerpts[locKey(loc)];
      if (html) {
        var ex = el("div", "excerpt");
        ex.innerHTML = html; // pygments output, escaped by the renderer
        var wrap = el("div", "loc-block");
        wrap.appendChild(box);
        wrap.appendChild(ex);
        return wrap;
      }
    }
    return box;
  };

  Viewer.prototype.notes = function (notes) {
    if (!notes || !notes.length) return null;
    var ul = el("ul", "notes");
    notes.forEach(function (n) { ul.appendChild(el("li", null, n)); });
    return ul;
  };

  // ---------------------------------------------------------------- trees

  var MARKERS = [["collapsed", "collapsed"], ["cycle", "recursion cut"], ["truncated", "cut"], ["unresolved", "unresolved"]];

  function TreeView(viewer, treeDoc, onSelect) {
    this.v = viewer;
    this.doc = treeDoc;
    this.onSelect = onSelect;
    this.nodes = [];  // index -> {n, parent, depth, kids: [index]}
    this.rows = {};   // index -> rendered element
    var stack = [[treeDoc.root, -1, 0]];
    while (stack.length) {
      var item = stack.pop();
      var id = this.nodes.length;
      this.nodes.push({ n: item[0], parent: item[1], depth: item[2], kids: [] });
      if (item[1] >= 0) this.nodes[item[1]].kids.push(id);
      var ch = item[0].children || [];
      for (var i = ch.length - 1; i >= 0; i--) stack.push([ch[i], id, item[2] + 1]);
    }
    // Twins of "expanded above" nodes: the first expanded node of the same name and place.
    this.expandedAt = {};
    for (var j = 0; j < this.nodes.length; j++) {
      var n = this.nodes[j].n;
      if (!(n.facts || n.attrs || {}).repeat && this.nodes[j].kids.length) {
        var k = this.identity(n);
        if (!(k in this.expandedAt)) this.expandedAt[k] = j;
      }
    }
  }
  // The same key the repeats were marked by (the `identity` fact), else name and place.
  TreeView.prototype.identity = function (n) {
    var id = (n.facts || n.attrs || {}).identity;
    if (typeof id === "string") return id;
    return n.name + "@" + (n.location ? n.location.path + ":" + n.location.line : "");
  };
  TreeView.prototype.label = function (n) {
    return ((n.facts || n.attrs || {}).op) || n.name;
  };
  TreeView.prototype.closed = function (n) {
    var a = n.facts || n.attrs || {};
    return !!(a.closed || a.closed_source);
  };
  TreeView.prototype.vendor = function (n) {
    var a = n.facts || n.attrs || {};
    return a.library || a.vendor || null;
  };

  TreeView.prototype.build = function () {
    var self = this;
    var box = el("div", "tree-view");
    var bar = el("div", "toolbar");
    this.search = el("input", "search");
    this.search.type = "search";
    this.search.placeholder = "search names, kernels, files";
    this.search.setAttribute("data-testid", "tree-search");
    var kinds = {}, devices = {};
    this.nodes.forEach(function (x) {
      kinds[x.n.kind] = 1;
      var d = (x.n.facts || x.n.attrs || {}).device;
      if (typeof d === "string") devices[d] = 1;
    });
    this.kindSel = this.select("kind", Object.keys(kinds).sort(), "every kind / layer");
    this.devSel = this.select("device", Object.keys(devices).sort(), "every device");
    this.vendorSel = this.select("vendor", ["open", "closed"], "open and closed");
    this.count = el("span", "count");
    this.count.setAttribute("data-testid", "tree-count");
    bar.appendChild(this.search);
    bar.appendChild(this.kindSel);
    bar.appendChild(this.devSel);
    bar.appendChild(this.vendorSel);
    // A filter is applied 150 ms after its last change; a button pressed meanwhile
    // applies it first, so the pending filter cannot undo what the button did.
    var timer = null;
    function settle() { if (timer !== null) { clearTimeout(timer); timer = null; self.applyFilter(); } }
    function refilter() { clearTimeout(timer); timer = setTimeout(function () { timer = null; self.applyFilter(); }, 150); }
    var expand = el("button", null, "expand all");
    expand.onclick = function () { settle(); self.expandAll(); };
    var collapse = el("button", null, "collapse");
    collapse.onclick = function () { settle(); self.reset(); };
    bar.appendChild(expand);
    bar.appendChild(collapse);
    bar.appendChild(this.count);
    box.appendChild(bar);
    this.body = el("div", "tree");
    this.body.setAttribute("data-testid", "tree");
    box.appendChild(this.body);
    this.search.addEventListener("input", refilter);
    [this.kindSel, this.devSel, this.vendorSel].forEach(function (s) { s.addEventListener("change", refilter); });
    this.reset();
    return box;
  };
  TreeView.prototype.select = function (name, values, all) {
    var s = el("select", "filter");
    s.setAttribute("data-testid", "filter-" + name);
    s.appendChild(el("option", null, all)).value = "";
    values.forEach(function (v) { s.appendChild(el("option", null, v)).value = v; });
    return s;
  };

  // One node's row and (empty until opened) children box.
  TreeView.prototype.row = function (id) {
    var self = this, x = this.nodes[id], n = x.n, a = n.facts || n.attrs || {};
    var wrap = el("div", "node");
    wrap.dataset.id = id;
    var r = el("div", "row k-" + n.kind);
    var tog = el("span", "tog", x.kids.length ? "\u25b8" : "\u00b7");
    r.appendChild(tog);
    r.appendChild(el("span", "name", this.label(n)));
    if (n.kind !== "op") r.appendChild(badge(n.kind, "kind"));
    if (a.duration_us !== undefined && n.kind !== "trace") r.appendChild(el("span", "dur", us(a.duration_us)));
    if (a.dispatch_key) r.appendChild(badge(a.dispatch_key, "key", "dispatch key" + (a.kernel ? ": " + a.kernel : "")));
    if (a.kernel && n.kind !== "op" && n.kind === "gpu_kernel") r.appendChild(badge("= " + a.kernel, "kern"));
    if (n.via) r.appendChild(badge("via " + n.via, "via"));
    if (n.condition) r.appendChild(badge(n.condition, "cond", "condition on this edge: " + n.condition));
    var vendor = this.vendor(n);
    if (vendor) r.appendChild(badge(vendor + (this.closed(n) ? " (closed)" : ""), this.closed(n) ? "closed" : "open"));
    if (a.conv_backend) r.appendChild(badge("backend " + a.conv_backend, "backend"));
    MARKERS.forEach(function (m) { if (a[m[0]]) r.appendChild(badge(m[1], "marker")); });
    if (a.repeat) {
      var twin = this.expandedAt[this.identity(n)];
      var link = el("a", "twin", "expanded above");
      link.href = "#";
      link.setAttribute("data-testid", "twin-link");
      link.onclick = function (ev) { ev.preventDefault(); ev.stopPropagation(); if (twin !== undefined) self.reveal(twin); };
      r.appendChild(link);
    }
    var loc = n.location || sourceLoc(a.source);
    if (loc && n.kind !== "op") r.appendChild(this.v.location(loc, false));
    wrap.appendChild(r);
    var kids = el("div", "kids");
    kids.hidden = true;
    // Indentation narrows with depth (16, 8, then 4 px a level), so a deep
    // path's rows keep room for their names inside the pane (no sideways scroll).
    if (x.depth >= 32) kids.style.marginLeft = "4px"; else if (x.depth >= 16) kids.style.marginLeft = "8px";
    wrap.appendChild(kids);
    r.onclick = function (ev) {
      if (ev.target.tagName === "A") return;
      if (x.kids.length && (ev.target === tog || !self.selected || self.selected === id)) self.toggle(id);
      self.choose(id);
    };
    this.rows[id] = wrap;
    return wrap;
  };
  TreeView.prototype.open = function (id, only) {
    var wrap = this.rows[id];
    if (!wrap) return;
    var kids = wrap.lastChild, x = this.nodes[id], self = this;
    if (!kids.dataset.filled || only) {
      kids.textContent = "";
      x.kids.forEach(function (k) { if (!only || only[k]) kids.appendChild(self.row(k)); });
      kids.dataset.filled = only ? "" : "1";
    }
    kids.hidden = false;
    wrap.firstChild.firstChild.textContent = x.kids.length ? "\u25be" : "\u00b7";
    wrap.classList.add("open");
  };
  TreeView.prototype.close = function (id) {
    var wrap = this.rows[id];
    wrap.lastChild.hidden = true;
    wrap.firstChild.firstChild.textContent = "\u25b8";
    wrap.classList.remove("open");
  };
  TreeView.prototype.toggle = function (id) {
    if (this.rows[id].classList.contains("open")) this.close(id); else this.open(id);
  };
  TreeView.prototype.reset = function () {
    this.rows = {};
    this.body.textContent = "";
    this.body.appendChild(this.row(0));
    // The main path (the fact `main`, Note [the main path]) opened to its end, the rest closed.
    var main = [0], cur = 0, self = this;
    while (this.isMain(cur)) {
      var next = this.nodes[cur].kids.filter(function (k) { return self.isMain(k); })[0];
      this.open(cur);
      if (next === undefined) break;
      main.push(next);
      cur = next;
    }
    if (main.length > 1) {
      main.forEach(function (id) { if (self.rows[id]) self.rows[id].classList.add("main"); });
      this.count.textContent = this.nodes.length + " nodes; the main path opened";
      this.body.setAttribute("data-applied", "");
      return;
    }
    // Open the first levels, as far as a screenful of rows goes.
    var queue = [0], shown = 1;
    while (queue.length) {
      var id = queue.shift();
      if (this.nodes[id].depth > 12 || shown + this.nodes[id].kids.length > 120) continue;
      this.open(id);
      shown += this.nodes[id].kids.length;
      queue.push.apply(queue, this.nodes[id].kids);
    }
    this.count.textContent = this.nodes.length + " nodes";
    this.body.setAttribute("data-applied", "");
  };
  TreeView.prototype.isMain = function (id) {
    var x = this.nodes[id];
    return !!(x && (x.n.facts || x.n.attrs || {}).main);
  };
  TreeView.prototype.expandAll = function () {
    var stack = [0], n = 0;
    while (stack.length && n < 5000) {
      var id = stack.pop();
      if (!this.rows[id]) continue;
      this.open(id);
      n++;
      stack.push.apply(stack, this.nodes[id].kids);
    }
  };
  TreeView.prototype.ancestors = function (id) {
    var path = [];
    for (var p = this.nodes[id].parent; p >= 0; p = this.nodes[p].parent) path.unshift(p);
    return path;
  };
  TreeView.prototype.reveal = function (id) {
    if (this.filtered) { this.search.value = ""; this.kindSel.value = this.devSel.value = this.vendorSel.value = ""; this.reset(); this.filtered = false; }
    var self = this;
    this.ancestors(id).forEach(function (p) { self.open(p); });
    var wrap = this.rows[id];
    if (!wrap) return;
    wrap.firstChild.scrollIntoView({ block: "center" });
    wrap.firstChild.classList.add("flash");
    setTimeout(function () { wrap.firstChild.classList.remove("flash"); }, 1500);
    this.choose(id);
  };
  TreeView.prototype.choose = function (id) {
    if (this.selected !== undefined && this.rows[this.selected]) this.rows[this.selected].firstChild.classList.remove("sel");
    this.selected = id;
    if (this.rows[id]) this.rows[id].firstChild.classList.add("sel");
    if (this.onSelect) this.onSelect(id);
  };
  TreeView.prototype.matches = function (x, q) {
    var n = x.n, a = n.facts || n.attrs || {};
    if (this.kindSel.value && n.kind !== this.kindSel.value) return false;
    if (this.devSel.value && a.device !== this.devSel.value) return false;
    if (this.vendorSel.value) {
      if (!this.vendor(n)) return false;
      if ((this.vendorSel.value === "closed") !== this.closed(n)) return false;
    }
    if (!q) return true;
    var hay = (n.name + " " + (a.op || "") + " " + (a.kernel || "") + " " + (a.source || "") + " " + (n.location ? n.location.path : "")).toLowerCase();
    return hay.indexOf(q) >= 0;
  };
  TreeView.prototype.applyFilter = function () {
    var q = this.search.value.trim().toLowerCase();
    if (!q && !this.kindSel.value && !this.devSel.value && !this.vendorSel.value) { this.filtered = false; this.reset(); return; }
    this.filtered = true;
    var keep = {}, hits = 0, LIMIT = 400;
    for (var id = 1; id < this.nodes.length && hits < LIMIT; id++) {
      if (!this.matches(this.nodes[id], q)) continue;
      hits++;
      // Bit 2: a hit; bit 1: holds a hit below it (opened). A node may be both.
      keep[id] = (keep[id] || 0) | 2;
      for (var p = this.nodes[id].parent; p >= 0 && !((keep[p] || 0) & 1); p = this.nodes[p].parent) keep[p] = (keep[p] || 0) | 1;
    }
    keep[0] = keep[0] || 1;
    this.rows = {};
    this.body.textContent = "";
    this.body.appendChild(this.row(0));
    var stack = [0];
    while (stack.length) {
      var cur = stack.pop();
      if (!(keep[cur] & 1)) continue;
      this.open(cur, keep);
      var self = this;
      this.nodes[cur].kids.forEach(function (k) { if (keep[k]) stack.push(k); });
    }
    for (var m in keep) if ((keep[m] & 2) && this.rows[m]) this.rows[m].firstChild.classList.add("hit");
    this.count.textContent = hits + (hits >= LIMIT ? "+" : "") + " matching";
    this.body.setAttribute("data-applied", [q, this.kindSel.value, this.devSel.value, this.vendorSel.value].join("|"));
  };

  // The nearest ancestor (or self) of a kind.
  TreeView.prototype.up = function (id, kinds) {
    for (var p = id; p >= 0; p = this.nodes[p].parent) if (kinds.indexOf(this.nodes[p].n.kind) >= 0) return p;
    return -1;
  };

  // ------------------------------------------------------ node details

  var HIDDEN_ATTRS = { event: 1, _hidden: 1 };

  Viewer.prototype.nodeDetail = function (tv, id, box) {
    var self = this, n = tv.nodes[id].n, a = n.facts || n.attrs || {};
    box.textContent = "";
    box.appendChild(el("h3", null, tv.label(n)));
    var meta = el("div", "detail-meta");
    meta.appendChild(badge(n.kind, "kind"));
    if (a.duration_us !== undefined) meta.appendChild(el("span", "dur", us(a.duration_us)));
    box.appendChild(meta);
    if (n.location) box.appendChild(this.location(n.location, true));
    // A kernel (GPU, or CPU below an op): the op that launched it, its dispatch path, its source.
    var isKernel = ["gpu_kernel", "kernel", "generated", "launch", "device_loop", "inner_loop", "vendor"].indexOf(n.kind) >= 0;
    var opId = tv.up(id, ["op"]);
    if (opId >= 0 && opId !== id) {
      var sec = el("div", "kernel-op");
      sec.setAttribute("data-testid", "kernel-op");
      sec.appendChild(el("h4", null, (isKernel ? "launched by operator " : "inside operator ")));
      var link = el("a", "op-link", tv.label(tv.nodes[opId].n));
      link.href = "#";
      link.onclick = function (ev) { ev.preventDefault(); tv.reveal(opId); };
      sec.firstChild.appendChild(link);
      box.appendChild(sec);
      box.appendChild(this.dispatchPath(tv.nodes[opId].n));
    }
    if (n.kind === "op") box.appendChild(this.dispatchPath(n));
    var src = sourceLoc(a.source);
    if (src) {
      var h = el("h4", null, "source");
      box.appendChild(h);
      var s = this.location(src, true);
      s.setAttribute && s.setAttribute("data-testid", "kernel-source");
      box.appendChild(s);
    } else if (a.source_reason) {
      box.appendChild(el("p", "reason", "source: " + a.source_reason));
    }
    var table = el("table", "attrs");
    Object.keys(a).forEach(function (k) {
      if (HIDDEN_ATTRS[k]) return;
      var tr = el("tr");
      tr.appendChild(el("th", null, k));
      var v = a[k], td = el("td");
      if (v && typeof v === "object" && typeof v.path === "string" && typeof v.line === "number") {
        td.appendChild(self.location(v, false));  // a location fact (call_site, declared_at): linked, never raw JSON
      } else if (Array.isArray(v)) {
        td.textContent = v.map(function (x) { return x && typeof x === "object" ? (x.name || x.path || "") : String(x); }).join(", ");
      } else {
        td.textContent = v && typeof v === "object" ? Object.keys(v).filter(function (x) { return x !== "file"; }).map(function (x) { return x + ": " + v[x]; }).join("; ") : v;
      }
      tr.appendChild(td);
      table.appendChild(tr);
    });
    box.appendChild(table);
    if (this.links.expand && n.kind === "note" && typeof a.node === "number") {
      var ex = el("a", "app-link", "open the calls not shown");  // the app's page of that node's bounded subtree
      ex.setAttribute("data-testid", "expand-node");
      ex.href = this.links.expand + "/" + a.node;
      box.appendChild(ex);
    }
    if (this.links.stack && n.kind === "op") {
      var st = el("a", "app-link", "stack of " + tv.label(n));
      st.href = this.links.stack + "?target=" + encodeURIComponent(tv.label(n));
      box.appendChild(st);
    }
  };
  Viewer.prototype.dispatchPath = function (n) {
    var a = n.facts || n.attrs || {}, box = el("div", "dispatch");
    box.setAttribute("data-testid", "dispatch-path");
    if (!a.dispatch_keys && !a.dispatch_key) return box;
    box.appendChild(el("h4", null, "dispatch path"));
    var keys = a.dispatch_keys || [a.dispatch_key];
    keys.forEach(function (k) { box.appendChild(badge(k, k === a.dispatch_key ? "key served" : "key")); });
    if (a.kernel) {
      var served = el("div", "served", "served by " + a.dispatch_key + ": " + a.kernel);
      if (a.registered_at && typeof a.registered_at === "object" && typeof a.registered_at.path === "string") {
        served.appendChild(el("span", null, "  (registered at "));  // a location: with its origin, so its version
        served.appendChild(this.location(a.registered_at, false));
        served.appendChild(el("span", null, ")"));
      } else if (a.registered_at) {
        served.appendChild(el("span", null, "  (registered at " + a.registered_at + ")"));
      }
      box.appendChild(served);
    }
    return box;
  };

  Viewer.prototype.calltree = function (treeDoc, mount) {
    var self = this;
    var layout = el("div", "split");
    var detail = el("aside", "detail");
    detail.setAttribute("data-testid", "detail");
    detail.appendChild(el("p", "hint", "Click a node to see its source, attributes and dispatch path."));
    var tv = new TreeView(this, treeDoc, function (id) { self.nodeDetail(tv, id, detail); });
    var n = this.notes(treeDoc.notes);
    if (n) mount.appendChild(n);
    layout.appendChild(tv.build());
    layout.appendChild(detail);
    mount.appendChild(layout);
    return tv;
  };

  // ---------------------------------------------------------- traces

  Viewer.prototype.table = function (rows, columns, onRow) {
    var t = el("table", "sortable"), thead = el("thead"), tbody = el("tbody"), hr = el("tr");
    var state = { col: null, dir: -1 };
    function fill() {
      tbody.textContent = "";
      rows.forEach(function (r) {
        var tr = el("tr");
        columns.forEach(function (c) {
          var v = c.get ? c.get(r) : r[c.key];
          var td = el("td", c.num ? "num" : null, c.num ? (v === null || v === undefined ? "" : (c.fmt ? c.fmt(v) : v)) : (v === null || v === undefined ? "" : v));
          if (!c.num && td.textContent.length > 40) td.title = td.textContent;  // shown whole on hover; the cell keeps one line
          if (c.loc && td.textContent.length > 34) td.textContent = "\u2026" + td.textContent.slice(-33);  // a location keeps its file:line
          tr.appendChild(td);
        });
        if (onRow) { tr.classList.add("clickable"); tr.onclick = function () { onRow(r); }; }
        tbody.appendChild(tr);
      });
    }
    columns.forEach(function (c) {
      var th = el("th", c.num ? "num" : null, c.title);
      th.onclick = function () {
        state.dir = state.col === c ? -state.dir : (c.num ? -1 : 1);
        state.col = c;
        var get = c.get || function (r) { return r[c.key]; };
        rows.sort(function (x, y) {
          var a = get(x), b = get(y);
          if (c.num) return state.dir * ((Number(a) || 0) - (Number(b) || 0));
          return state.dir * String(a || "").localeCompare(String(b || ""));
        });
        Array.prototype.forEach.call(hr.children, function (h) { h.removeAttribute("data-sort"); });
        th.setAttribute("data-sort", state.dir > 0 ? "asc" : "desc");
        fill();
      };
      hr.appendChild(th);
    });
    thead.appendChild(hr);
    t.appendChild(thead);
    t.appendChild(tbody);
    fill();
    return t;
  };

  // Icicle: time by module -> op -> kernel; other frames are passed through.
  var ICICLE_KINDS = { trace: 1, module: 1, op: 1, autograd: 1, gpu_kernel: 1, kernel: 1, gpu_memcpy: 1 };
  Viewer.prototype.icicle = function (tv) {
    var outer = el("div", "icicle-wrap"), bar = el("div", "toolbar"), box = el("div", "icicle");
    var hint = el("span", "hint", "click a block to open it in the tree; shift-click to zoom to it");
    var unzoom = el("button", null, "zoom out");
    bar.appendChild(hint);
    bar.appendChild(unzoom);
    outer.appendChild(bar);
    outer.appendChild(box);
    box.setAttribute("data-testid", "icicle");
    var rootDur = Number((tv.nodes[0].n.facts || tv.nodes[0].n.attrs || {}).duration_us) || 0;
    if (!rootDur) return box;
    var ROW = 18, maxDepth = 0, cells = 0;
    // (node index, icicle depth, left fraction, width fraction)
    var stack = [[0, 0, 0, 1]];
    var frag = document.createDocumentFragment();
    while (stack.length && cells < 6000) {
      var it = stack.pop(), id = it[0], depth = it[1], left = it[2], width = it[3];
      // The nearest descendants of icicle kinds, in order.
      var found = [], walk = tv.nodes[id].kids.slice().reverse();
      while (walk.length) {
        var k = walk.pop();
        if (ICICLE_KINDS[tv.nodes[k].n.kind]) found.push(k);
        else { var kk = tv.nodes[k].kids; for (var i = kk.length - 1; i >= 0; i--) walk.push(kk[i]); }
      }
      var parentDur = Number((tv.nodes[id].n.facts || tv.nodes[id].n.attrs || {}).duration_us) || 0;
      var total = 0;
      found.forEach(function (f) { total += Number((tv.nodes[f].n.facts || tv.nodes[f].n.attrs || {}).duration_us) || 0; });
      var scale = total > parentDur && total > 0 ? parentDur / total : 1;
      var x = left;
      for (var j = 0; j < found.length; j++) {
        var f = found[j], n = tv.nodes[f].n, d = Number((n.facts || n.attrs || {}).duration_us) || 0;
        var w = parentDur ? width * (d / parentDur) * scale : 0;
        if (w >= 0.0015) {
          var c = el("div", "cell k-" + n.kind);
          c.style.left = (x * 100) + "%";
          c.style.width = (w * 100) + "%";
          c.style.top = (depth * ROW) + "px";
          c.textContent = tv.label(n);
          c.dataset.dur = us(d);  // drawn after the label (CSS): what and how long; a zoom makes a sliver readable
          c.title = tv.label(n) + " (" + n.kind + ") " + us(d);
          c.dataset.left = x;
          c.dataset.width = w;
          c.dataset.id = f;
          frag.appendChild(c);
          cells++;
          maxDepth = Math.max(maxDepth, depth + 1);
          if (depth < 24) stack.push([f, depth + 1, x, w]);
        }
        x += w;
      }
    }
    var inner = el("div", "icicle-inner");
    inner.style.height = (maxDepth * ROW + 4) + "px";
    inner.appendChild(frag);
    box.appendChild(inner);
    box.addEventListener("click", function (ev) {
      var d = ev.target.dataset || {};
      if (ev.shiftKey && d.width !== undefined) { ev.preventDefault(); zoom(Number(d.left), Number(d.width)); return; }
      if (d.id !== undefined) tv.reveal(Number(d.id));
    });
    // Zoom: the block double-clicked fills the width; its neighbours scroll beside it.
    function zoom(left, width) {
      var factor = Math.min(1 / Math.max(width, 1e-6), 2000);
      inner.style.width = (factor * 100) + "%";
      box.scrollLeft = left * box.scrollWidth;
      box.setAttribute("data-zoom", factor.toFixed(2));
    }
    unzoom.onclick = function () { zoom(0, 1); };
    return outer;
  };

  Viewer.prototype.tabs = function (mount, names) {
    var bar = el("nav", "tabs"), panes = {}, buttons = {};
    names.forEach(function (name, i) {
      var b = el("button", "tab", name);
      b.setAttribute("data-testid", "tab-" + name);
      var p = el("section", "pane");
      p.setAttribute("data-testid", "pane-" + name);
      p.hidden = i !== 0;
      if (i === 0) b.classList.add("on");
      b.onclick = function () {
        names.forEach(function (m) { panes[m].hidden = m !== name; buttons[m].classList.toggle("on", m === name); });
      };
      bar.appendChild(b);
      panes[name] = p;
      buttons[name] = b;
    });
    mount.appendChild(bar);
    names.forEach(function (name) { mount.appendChild(panes[name]); });
    return { panes: panes, show: function (name) { buttons[name].onclick(); } };
  };

  Viewer.prototype.trace = function (mount) {
    var self = this, doc = this.doc, tv = null;
    var meta = (doc.tree && doc.tree.meta) || {};
    var facts = el("p", "facts");
    facts.textContent = [meta.recorded || meta.file, meta.torch ? "torch " + meta.torch : null, meta.events ? meta.events + " events" : null, meta.device_events ? meta.device_events + " device events" : null].filter(Boolean).join(" \u00b7 ");
    mount.appendChild(facts);
    var names = [];
    if (doc.tree) names.push("tree", "time");
    if (doc.summary) names.push("operators", "modules", "files");
    var tabs = this.tabs(mount, names);
    if (doc.tree) {
      tv = this.calltree(doc.tree, tabs.panes.tree);
      var show = tv.reveal;
      tv.reveal = function (id) { tabs.show("tree"); show.call(tv, id); };
      tabs.panes.time.appendChild(el("p", "hint", "Time by module \u2192 operator \u2192 kernel; click a block to open it in the tree."));
      tabs.panes.time.appendChild(this.icicle(tv));
    }
    if (doc.summary) {
      var s = doc.summary;
      var notes = this.notes(s.notes);
      if (notes && !doc.tree) mount.insertBefore(notes, mount.firstChild);
      var findOp = function (row) {
        if (!tv) return;
        tabs.show("tree");
        tv.search.value = row.name;
        tv.applyFilter();
      };
      tabs.panes.operators.appendChild(this.table(s.ops.slice(), [
        { title: "operator", key: "name" }, { title: "source", get: function (r) { return r.source ? r.source + (r.source_version ? " (" + r.source_version + ")" : "") : ""; }, loc: 1 }, { title: "calls", key: "calls", num: 1 },
        { title: "self", key: "self_us", num: 1, fmt: us }, { title: "total", key: "total_us", num: 1, fmt: us },
        { title: "device", key: "device_us", num: 1, fmt: us }, { title: "key", key: "dispatch_key" }, { title: "kernel", key: "kernel" },
        { title: "overload", key: "op" }, { title: "vendor", get: function (r) { var lib = r.library || r.vendor; return lib ? lib + (r.closed ? " (closed)" : "") : (r.closed ? "closed below" : ""); } },
        { title: "GPU kernels", get: function (r) { return (r.kernels || []).map(function (k) { return k.name; }).join(", "); } }
      ], findOp));
      var group = [{ title: "name", key: "name" }, { title: "calls", key: "calls", num: 1 }, { title: "total", key: "total_us", num: 1, fmt: us },
        { title: "device", key: "device_us", num: 1, fmt: us }, { title: "operators", get: function (r) { return Object.keys(r.ops || {}).join(", "); } }];
      tabs.panes.modules.appendChild(this.table(s.modules.slice(), group));
      // a file of a trace that mixes versions says which it is of (Note [versions in a trace] in kernelmap.trace.summary)
      var file = [{ title: "name", get: function (r) { return r.name + (r.version ? " (" + r.version + ")" : ""); } }].concat(group.slice(1));
      tabs.panes.files.appendChild(this.table(s.files.slice(), file));
    }
  };

  // ------------------------------------------------- where / explain / any

  Viewer.prototype.kernels = function (list) {
    var self = this;
    return this.table(list.slice(), [
      { title: "key", key: "key" }, { title: "symbol", key: "symbol" }, { title: "kind", key: "kind" },
      { title: "location", get: function (k) { return k.location ? k.location.path + ":" + k.location.line : ""; } }
    ], function (k) { if (k.location) self.showLoc(k.location); });
  };
  Viewer.prototype.showLoc = function (loc) {
    if (!this.locPane) return;
    this.locPane.textContent = "";
    this.locPane.appendChild(this.location(loc, true));
  };
  Viewer.prototype.where = function (mount) {
    var d = this.doc, op = d.operator || {}, self = this;
    var n = this.notes(d.notes);
    if (n) mount.appendChild(n);
    var head = el("div", "op-head");
    head.appendChild(el("h2", null, op.name));
    head.appendChild(badge(op.kind, "kind"));
    ["is_view", "is_inplace", "is_out"].forEach(function (f) { if (op[f]) head.appendChild(badge(f.slice(3), "marker")); });
    mount.appendChild(head);
    mount.appendChild(el("pre", "schema", op.schema));
    if (op.location) mount.appendChild(this.location(op.location, true));
    if (d.also && d.also.length) mount.appendChild(el("p", null, "also: " + d.also.map(function (o) { return (o && o.name) || String(o); }).join(", ")));
    if (op.python_entry_points && op.python_entry_points.length) mount.appendChild(el("p", null, "Python: " + op.python_entry_points.join(", ")));
    if (d.structured_delegate) mount.appendChild(el("p", null, "structured delegate: " + d.structured_delegate.name));
    this.locPane = el("div", "loc-pane");
    mount.appendChild(el("h3", null, "kernels per dispatch key (yaml)"));
    mount.appendChild(this.kernels(op.dispatch || []));
    var delegate = d.structured_delegate;
    if (delegate && delegate.dispatch && delegate.dispatch.length) {  // the kernels that run it, as the CLI lists them
      var own = {};
      (op.dispatch || []).forEach(function (k) { own[k.key] = 1; });
      var via = delegate.dispatch.filter(function (k) { return !own[k.key]; });
      if (via.length) {
        var h = el("h3", null, "kernels via its structured delegate " + delegate.name);
        h.setAttribute("data-testid", "delegate-kernels");
        mount.appendChild(h);
        mount.appendChild(this.kernels(via));
      }
    }
    if (op.autograd) {
      mount.appendChild(el("h3", null, "autograd: " + op.autograd.backward_node));
      if (op.autograd.location) mount.appendChild(this.location(op.autograd.location, true));
    }
    if (d.live) {
      mount.appendChild(el("h3", null, "live dispatcher"));
      var p = d.live.dispatch_path;
      if (p) {
        var path = el("div", "dispatch");
        path.setAttribute("data-testid", "dispatch-path");
        (p.steps || []).forEach(function (s) { path.appendChild(badge(s.key + " " + s.action, "key", s.kernel ? s.kernel.symbol : "")); });
        mount.appendChild(path);
      }
      mount.appendChild(this.kernels(d.live.registrations || []));
    }
    if (d.source && d.source.length) {  // entry kernel, stub kernel and leaves on the device, as the CLI's source section
      var first = d.source[0].location;
      var sh = el("h3", null, "source" + (first && first.origin ? " (" + first.origin + ")" : ""));
      sh.setAttribute("data-testid", "source-section");
      mount.appendChild(sh);
      var table = el("table", "source-steps");
      d.source.forEach(function (s) {
        var tr = el("tr");
        tr.appendChild(el("td", "role", s.role));
        tr.appendChild(el("td", "name", s.name));
        var at = el("td");
        if (s.location) at.appendChild(self.location(s.location, false));
        tr.appendChild(at);
        tr.appendChild(el("td", "detail", s.detail || ""));
        table.appendChild(tr);
      });
      mount.appendChild(table);
    }
    mount.appendChild(this.locPane);
    this.rest(mount, d, { kernelmap: 1, query: 1, torch: 1, notes: 1, operator: 1, also: 1, structured_delegate: 1, live: 1, source: 1, origins: 1 });
  };
  Viewer.prototype.explain = function (mount) {
    var d = this.doc, self = this;
    mount.appendChild(el("h2", null, d.op + (d.device ? " on " + d.device : "")));
    var n = this.notes(d.notes);
    if (n) mount.appendChild(n);
    var ol = el("ol", "steps");
    (d.steps || []).forEach(function (s) {
      var li = el("li", "step");
      li.appendChild(el("h3", null, s.title));
      if (s.summary) li.appendChild(el("p", null, s.summary));
      if (s.location) {
        var shown = self.location(s.location, true);
        li.appendChild(shown);
        if (!self.excerpts[locKey(s.location)] && s.excerpt) li.appendChild(el("pre", "code", s.excerpt));
      } else if (s.excerpt) li.appendChild(el("pre", "code", s.excerpt));
      if (s.alternatives && s.alternatives.length) {  // what runs instead, and the condition that picks it
        var alts = el("ul", "alternatives");
        alts.setAttribute("data-testid", "step-alternatives");
        s.alternatives.forEach(function (a) {
          var item = el("li", null, "or " + a.name + (a.note ? ": " + a.note : "") + (a.condition ? " [" + a.condition + "]" : "") + " ");
          if (a.location) item.appendChild(self.location(a.location, false));
          alts.appendChild(item);
        });
        li.appendChild(alts);
      }
      ol.appendChild(li);
    });
    mount.appendChild(ol);
  };
  // What an edit costs: the edited files, the rebuilt units by kind and library,
  // the estimate with its model, the advice, the operators, every unit in a table.
  Viewer.prototype.impact = function (mount) {
    var d = this.doc, self = this;
    mount.appendChild(el("h2", null, "impact of " + d.query + " on " + d.device));
    var n = this.notes(d.notes);
    if (n) mount.appendChild(n);
    var edited = el("ul", "impact-edited");
    (d.edited || []).forEach(function (e) {
      var li = el("li");
      li.appendChild(e.location ? self.location(e.location, true) : el("code", "loc-path", e.path));
      li.appendChild(el("span", "reason", " " + e.reason));
      edited.appendChild(li);
    });
    mount.appendChild(edited);
    var units = d.units || [], counts = d.counts || {};
    var head = el("div", "impact-counts");
    head.setAttribute("data-testid", "impact-units");
    head.appendChild(el("strong", null, units.length + " units rebuild "));
    Object.keys(counts).forEach(function (k) { head.appendChild(badge(k + " " + counts[k], "kind")); });
    if (d.maybe) head.appendChild(badge(d.maybe + " maybe", "marker", "reached only through #if conditions kernelmap cannot decide"));
    mount.appendChild(head);
    var libs = el("div", "impact-libraries");
    Object.keys(d.libraries || {}).forEach(function (k) { libs.appendChild(badge(k + " " + d.libraries[k], "key")); });
    mount.appendChild(libs);
    var est = d.estimate || {};
    if (units.length) {
      mount.appendChild(el("p", "impact-estimate", "estimated " + Math.round(est.cpu_seconds) + " CPU-seconds, about " +
        Math.round(est.wall_seconds) + " s on " + est.jobs + " parallel jobs"));
      mount.appendChild(el("p", "impact-model", est.model + "; " + est.error));
    }
    if ((d.advice || []).length) {
      mount.appendChild(el("h3", null, "cheaper"));
      var ul = el("ul", "impact-advice");
      d.advice.forEach(function (a) {
        var li = el("li", null, a.summary + ": " + a.units + " units, " + Math.round(a.cpu_seconds) + " CPU-seconds ");
        if (a.location) li.appendChild(self.location(a.location, false));
        ul.appendChild(li);
      });
      mount.appendChild(ul);
    }
    if ((d.operators || []).length) {
      var ops = el("details", "impact-operators");
      ops.appendChild(el("summary", null, d.operators.length + " operators whose code they hold"));
      ops.appendChild(el("p", null, d.operators.join(", ")));
      mount.appendChild(ops);
    }
    if (units.length) {
      mount.appendChild(el("h3", null, "units"));
      mount.appendChild(this.table(units.slice(), [
        { title: "source", key: "path" }, { title: "kind", get: function (u) { return u.capability || u.kind; } },
        { title: "library", key: "library" }, { title: "seconds", key: "seconds", num: true, fmt: function (v) { return Number(v).toFixed(1); } },
        { title: "maybe", get: function (u) { return u.maybe ? "maybe" : ""; } }]));
    }
    if ((d.third_party || []).length) mount.appendChild(el("p", null, "third-party headers it includes (named, not followed): " + d.third_party.join(", ")));
  };
  // Any document: its fields as nested lists, locations with their excerpts.
  Viewer.prototype.object = function (value, depth) {
    var self = this;
    if (value === null || typeof value !== "object") return el("span", "val", value === null ? "null" : value);
    if (typeof value.path === "string" && typeof value.line === "number") return this.location(value, true);
    var dl = el(Array.isArray(value) ? "ol" : "dl", "obj");
    if (depth > 12) { dl.appendChild(el("span", "val", JSON.stringify(value))); return dl; }
    Object.keys(value).forEach(function (k) {
      if (Array.isArray(value)) { var li = el("li"); li.appendChild(self.object(value[k], depth + 1)); dl.appendChild(li); return; }
      if (k === "file" || k === "origins" || k === "root") return;  // paths of this machine, and the origin table: never shown
      dl.appendChild(el("dt", null, k));
      var dd = el("dd");
      dd.appendChild(self.object(value[k], depth + 1));
      dl.appendChild(dd);
    });
    return dl;
  };
  Viewer.prototype.rest = function (mount, d, shown) {
    var rest = {};
    Object.keys(d).forEach(function (k) { if (!shown[k]) rest[k] = d[k]; });
    if (Object.keys(rest).length) mount.appendChild(this.object(rest, 0));
  };
  Viewer.prototype.generic = function (mount) {
    var n = this.notes(this.doc.notes);
    if (n) mount.appendChild(n);
    mount.appendChild(this.object(this.doc, 0));
  };

  Viewer.prototype.draw = function () {
    var mount = el("div", "view view-" + this.data.view);
    this.root.textContent = "";
    this.root.appendChild(mount);
    var v = this.data.view;
    if (v === "calltree") this.calltree(this.doc, mount);
    else if (v === "trace") this.trace(mount);
    else if (v === "where") this.where(mount);
    else if (v === "explain") this.explain(mount);
    else if (v === "impact") this.impact(mount);
    else this.generic(mount);
    var raw = el("details", "raw");
    raw.appendChild(el("summary", null, "JSON document"));
    var pre = el("pre", "json");
    raw.addEventListener("toggle", function () { if (!pre.textContent) pre.textContent = JSON.stringify(this.doc, null, 1); }.bind(this));
    raw.appendChild(pre);
    this.root.appendChild(raw);
    this.root.setAttribute("data-km-ready", "1");
    if (window.performance && performance.mark) performance.mark("km-rendered");
  };

  // Large documents are embedded gzip-compressed (base64); the browser's own
  // DecompressionStream unpacks them, nothing is fetched.
  function load(script, done) {
    var text = script.textContent;
    if (script.getAttribute("data-encoding") !== "gzip-base64") { done(JSON.parse(text)); return; }
    var bin = atob(text.trim()), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    new Response(stream).text().then(function (t) { done(JSON.parse(t)); });
  }
  function start() {
    var roots = document.querySelectorAll("[data-km-root]");
    Array.prototype.forEach.call(roots, function (root) {
      var data = root.nextElementSibling;
      if (!data || !data.classList.contains("km-data")) return;
      load(data, function (d) { new Viewer(root, d).draw(); });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
