// The portal is a static single-page app (no server rendering): `nuxi
// generate` writes .output/public, which the orchestrator serves (package
// pkg/portal) together with /config.json, the runtime configuration
// (issuer, client id, API path) that lets one build serve every deployment.
// Nothing here may load from another origin: operators run it air-gapped,
// so there are no web fonts, icon services or external scripts.
export default defineNuxtConfig({
  ssr: false,
  telemetry: false,
  devtools: { enabled: false },
  compatibilityDate: '2025-07-15',
  css: ['~/assets/main.css'],
  app: {
    head: {
      title: 'flexplane',
      htmlAttrs: { lang: 'en' },
      meta: [
        { name: 'viewport', content: 'width=device-width, initial-scale=1' },
        { name: 'color-scheme', content: 'light dark' },
      ],
      link: [{ rel: 'icon', type: 'image/svg+xml', href: '/favicon.svg' }],
    },
  },
  typescript: { strict: true },
})
