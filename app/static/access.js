// access.js: the playground's API calls as the person sees them: errors shown above the
// composer, and the API key (or an end user's token) asked for when the service answers 401
// (kept in sessionStorage).

import {ApiError} from './agentloop.js';
import {askKey} from './panels.js';

const $ = (id) => document.getElementById(id);
const KEY = 'agentloop.key';  // sessionStorage: typed once, kept while the tab lives

export class Access {
  constructor(client) {
    this.client = client;
    client.apiKey = sessionStorage.getItem(KEY);
    $('forget-key').hidden = !client.apiKey;
    $('forget-key').addEventListener('click', () => this.forget());
  }

  /** An API call; a 401 asks for the key (kept in sessionStorage) and tries again. */
  async call(action) {
    try {
      $('error').hidden = true;
      return await action();
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        const key = await askKey($('key-dialog'));
        if (key) {
          sessionStorage.setItem(KEY, key);
          this.client.apiKey = key;
          $('forget-key').hidden = false;
          return this.call(action);
        }
      }
      this.showError(error);
      throw error;
    }
  }

  /** Whether the credential is an end user's token (a JWT: three dot-separated parts), not
   * the tenant's API key: its runs name an agent and set only what the agent allows. */
  endUser() {
    return (this.client.apiKey ?? '').split('.').length === 3;
  }

  showError(error) {
    $('error').textContent = error.field ? `${error.message} (${error.field})` : error.message;
    $('error').hidden = false;
  }

  forget() {
    sessionStorage.removeItem(KEY);
    this.client.apiKey = null;
    $('forget-key').hidden = true;
  }
}
