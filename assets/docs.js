// The API reference page (/docs): Swagger UI over /openapi.json. A file, not an inline
// script: the page's CSP allows scripts of this origin only.
window.addEventListener('load', function () {
  window.ui = SwaggerUIBundle({
    url: '/openapi.json',
    dom_id: '#swagger-ui',
    deepLinking: true,
    // No validator badge: it would ask validator.swagger.io about the document.
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
    defaultModelsExpandDepth: 0,
  });
});
