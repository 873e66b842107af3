/* A model page's tabs: one panel shown at a time, chosen by a click, the arrow keys or the address's #tab (deep
 * links; an anchor inside a panel opens that panel), kept in the address without a new history entry. The
 * "Upload a new version" button opens the upload form on the Overview. */
(function () {
  "use strict";

  function start() {
    const list = document.querySelector('.tabs[role="tablist"]');
    if (!list) return;
    const tabs = [...list.querySelectorAll('[role="tab"]')];
    const panels = tabs.map((tab) => document.getElementById(tab.getAttribute("aria-controls")));

    function select(index, { focus = false, remember = true } = {}) {
      tabs.forEach((tab, i) => {
        const chosen = i === index;
        tab.setAttribute("aria-selected", chosen ? "true" : "false");
        tab.tabIndex = chosen ? 0 : -1;
        panels[i].hidden = !chosen;
      });
      if (focus) tabs[index].focus();
      if (remember) {
        const url = new URL(window.location.href);
        url.hash = index === 0 ? "" : panels[index].dataset.tab;
        window.history.replaceState(null, "", url);
      }
      list.dataset.selected = panels[index].dataset.tab;
      window.dispatchEvent(new Event("resize")); // charts drawn in a hidden panel take their size now
    }

    function fromAddress() {
      const wanted = decodeURIComponent(window.location.hash.slice(1));
      if (!wanted) return select(0, { remember: false });
      let index = panels.findIndex((panel) => panel.dataset.tab === wanted);
      const target = index < 0 ? document.getElementById(wanted) : null;
      if (target) index = panels.findIndex((panel) => panel.contains(target));
      select(Math.max(index, 0), { remember: false });
      if (target) target.scrollIntoView();
    }

    tabs.forEach((tab, index) => {
      tab.addEventListener("click", (event) => {
        event.preventDefault();
        select(index);
      });
      tab.addEventListener("keydown", (event) => {
        const step = { ArrowRight: 1, ArrowLeft: -1, Home: -index, End: tabs.length - 1 - index }[event.key];
        if (step === undefined) return;
        event.preventDefault();
        select((index + step + tabs.length) % tabs.length, { focus: true });
      });
    });
    window.addEventListener("hashchange", fromAddress);
    fromAddress();

    const open = document.getElementById("upload-open");
    const upload = document.getElementById("upload");
    if (open && upload) {
      open.addEventListener("click", () => {
        select(0);
        upload.hidden = !upload.hidden;
        open.setAttribute("aria-expanded", upload.hidden ? "false" : "true");
        if (!upload.hidden) upload.querySelector("input[type=file]").focus();
      });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
