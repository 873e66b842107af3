/* Copy buttons: <button type="button" data-copy="element-id">Copy</button> copies that element's text and says so. */
(function () {
  "use strict";

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-copy]");
    if (!button) return;
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    const label = button.dataset.label || button.textContent;
    button.dataset.label = label;
    try {
      await navigator.clipboard.writeText(source.textContent);
      button.textContent = "Copied";
    } catch (error) {
      // no clipboard (a page not served over HTTPS or localhost): select the text for Ctrl+C instead
      window.getSelection().selectAllChildren(source);
      button.textContent = "Selected: press Ctrl+C";
    }
    setTimeout(() => {
      button.textContent = label;
    }, 2000);
  });
})();
