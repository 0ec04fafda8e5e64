// cronchain serve's one script, shipped in the package; the page reads the same without
// it, only still and without asking before a control. Three things, in plain JavaScript
// (no library to ship or to keep):
// - each exact time's title says it in the viewer's own zone too, which only the
//   browser knows;
// - a control's form asks first (its data-confirm) and goes only if the operator agrees;
// - the parts of a page marked data-live (the jobs list, a job's slots and history) are
//   fetched again every few seconds while the tab is in view, and swapped in place: no
//   reload, so a filter or a reason being typed is kept, and a part holding the
//   keyboard's focus waits for the next round.
"use strict";
(function () {
  var EVERY = 5000; // ms between two fetches of a live page
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
  });

  function zoned(root) {
    root.querySelectorAll("time[datetime]").forEach(function (time) {
      var when = new Date(time.getAttribute("datetime"));
      if (isNaN(when.getTime()) || time.dataset.zoned) return;
      var yours = "in your zone (" + zone + "): " + format.format(when);
      time.title = time.title ? time.title + "\n" + yours : yours;
      time.dataset.zoned = "1";
    });
  }

  // One round at a time: the next is set once this one has settled, so a slow server
  // never has rounds piled up, and an older answer never lands over a newer one. A round
  // the server does not answer within the pause is dropped; one it refuses (401, 403:
  // signed out) ends the updates.
  function refresh(parts) {
    if (document.hidden) return later(parts, EVERY);
    var stop = new AbortController();
    var timer = setTimeout(function () { stop.abort(); }, EVERY);
    fetch(location.href, { cache: "no-store", credentials: "same-origin", signal: stop.signal })
      .then(function (answer) {
        if (answer.status === 401 || answer.status === 403) return "stop";
        return answer.ok ? answer.text() : null;
      })
      .then(function (html) {
        if (html === "stop") return;
        if (html !== null) swap(parts, new DOMParser().parseFromString(html, "text/html"));
        later(parts, html === null ? 2 * EVERY : EVERY);
      })
      .catch(function () { later(parts, 2 * EVERY); }) // away: ask again, less often
      .finally(function () { clearTimeout(timer); });
  }

  function later(parts, ms) {
    setTimeout(refresh, ms, parts);
  }

  // A part is left as it is while someone is in it: its keyboard focus, the pointer on
  // something that has a title (a cell's being read), a selection in it, or a field in
  // it changed and not sent (a reason typed, a box ticked).
  function busy(part) {
    var selected = window.getSelection();
    return part.contains(document.activeElement) || part.querySelector("[title]:hover") ||
      (selected && !selected.isCollapsed && part.contains(selected.anchorNode)) ||
      Array.prototype.some.call(part.querySelectorAll("input, select, textarea"), changed);
  }

  function changed(field) {
    if (field.type === "checkbox" || field.type === "radio") {
      return field.checked !== field.defaultChecked;
    }
    if (field.tagName === "SELECT") {
      return Array.prototype.some.call(field.options, function (o) {
        return o.selected !== o.defaultSelected;
      });
    }
    return field.type !== "hidden" && field.value !== field.defaultValue;
  }

  function swap(parts, fresh) {
    parts.forEach(function (part) {
      var now = fresh.getElementById(part.id);
      if (now && !busy(part) && now.innerHTML !== part.fetched) {
        part.innerHTML = part.fetched = now.innerHTML;
        zoned(part);
      }
    });
    document.body.dataset.refreshed = String(Date.now());
  }

  document.addEventListener("submit", function (event) {
    var asks = event.target.dataset.confirm;
    if (asks && !window.confirm(asks)) event.preventDefault();
  });

  var parts = Array.prototype.slice.call(document.querySelectorAll("[data-live][id]"));
  parts.forEach(function (part) { part.fetched = part.innerHTML; }); // as the server sent it
  zoned(document);
  if (parts.length) later(parts, EVERY);
})();
