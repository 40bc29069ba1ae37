// Site-wide behaviour. No inline scripts anywhere: the CSP forbids them.
document.addEventListener("htmx:configRequest", (e) => {
  const meta = document.querySelector('meta[name="csrf-token"]');
  if (meta) e.detail.headers["X-CSRF-Token"] = meta.content;
});

// Swap 4xx fragments too: validation errors (422), too-large uploads (413) and conflicts
// (409) come back as HTML the user must see. htmx 2 discards them by default.
htmx.config.responseHandling = [
  { code: "204", swap: false },
  { code: "[23]..", swap: true },
  { code: "4..", swap: true, error: false },
  { code: "...", swap: false, error: true },
];
