/**
 * The extension's icon: a GPU chip with a pause sign, drawn in the theme's
 * icon colour so it follows light and dark themes.
 */
import { LabIcon } from '@jupyterlab/ui-components';

const SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M7 3h2v2h2V3h2v2h2V3h2v2h1a2 2 0 0 1 2 2v1h2v2h-2v2h2v2h-2v2h2v2h-2v1a2 2 0 0 1-2 2h-1v2h-2v-2h-2v2h-2v-2H9v2H7v-2H6a2 2 0 0 1-2-2v-1H2v-2h2v-2H2v-2h2V8H2V6h2V7a2 2 0 0 1 2-2h1V3zm-1 4v12h12V7H6z"/>
    <path d="M9 9h2.2v6H9zM12.8 9H15v6h-2.2z"/>
  </g>
</svg>`;

/**
 * Icon of the sessions panel.
 */
export const gpuPauseIcon = new LabIcon({
  name: 'jupyter-gpu-pause:icon',
  svgstr: SVG
});
