// The public project page's live part (net/page): draws the charts with the
// vendored uPlot and polls the page's JSON API every few seconds while the
// page is visible (backing off on errors, stopping while hidden). The
// numbers are already in the HTML; this only keeps them current. Every value
// reaches the DOM as text (textContent), never as HTML.
'use strict';
(function () {
    const project = document.body.dataset.project;
    if (!project)
        return;
    const api = '/api/projects/' + encodeURIComponent(project);
    const pollMs = 5000;
    const maxPollMs = 60000;
    const maxRows = 20000;
    const recentRounds = 10;
    const number = new Intl.NumberFormat('en');
    const compact = new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 });
    let delay = pollMs;
    let timer = 0;
    let generation = -1;
    let rows = []; // [round, tokens, train_loss, val_loss, volunteers, time_ms], oldest first
    const charts = {};

    const byId = (id) => document.getElementById(id);
    const loss = (v) => (v === null || v === undefined ? '–' : v.toFixed(4));
    const utc = (ms) => (ms ? new Date(ms).toISOString().slice(0, 16).replace('T', ' ') + ' UTC' : '–');
    const cssColor = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

    function setText(id, text) {
        const e = byId(id);
        if (e && e.textContent !== text)
            e.textContent = text;
    }

    function element(tag, text, attributes) {
        const e = document.createElement(tag);
        if (text !== undefined && text !== null)
            e.textContent = String(text);
        for (const [k, v] of Object.entries(attributes || {}))
            e.setAttribute(k, v);
        return e;
    }

    function row(cells) {
        const tr = element('tr');
        for (const c of cells)
            tr.appendChild(element('td', c));
        return tr;
    }

    async function getJson(url) {
        const reply = await fetch(url, { cache: 'no-store', credentials: 'omit' });
        if (!reply.ok)
            throw new Error(url + ': HTTP ' + reply.status);
        return reply.json();
    }

    // Only what is new: rows from the newest round held on.
    async function loadMetrics() {
        for (let page = 0; page < 50; ++page) {
            const since = rows.length ? rows[rows.length - 1][0] : 0;
            const reply = await getJson(api + '/metrics?since=' + since);
            rows = rows.filter((r) => r[0] < since).concat(reply.rows);
            if (!reply.more)
                break;
        }
        if (rows.length > maxRows)
            rows = rows.filter((r, i) => i >= rows.length / 2 || i % 2 === 0);
    }

    function axis(label, values) {
        const fg = cssColor('--muted');
        const line = cssColor('--line');
        return { label, stroke: fg, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 }, values };
    }

    function lossSeries() {
        return [
            { label: 'train', stroke: cssColor('--train'), width: 2, spanGaps: true, value: (u, v) => loss(v) },
            {
                label: 'validation', stroke: cssColor('--val'), width: 2, spanGaps: true,
                points: { show: true, size: 5 }, value: (u, v) => loss(v),
            },
        ];
    }

    const charted = {
        'chart-loss-tokens': {
            data: () => [rows.map((r) => r[1]), rows.map((r) => r[2]), rows.map((r) => r[3])],
            options: () => ({
                scales: { x: { time: false } },
                axes: [axis('tokens trained', (u, ticks) => ticks.map((v) => compact.format(v))), axis('loss')],
                series: [{ label: 'tokens', value: (u, v) => (v === null ? '–' : number.format(v)) }, ...lossSeries()],
            }),
        },
        'chart-loss-time': {
            data: () => [rows.map((r) => r[5] / 1000), rows.map((r) => r[2]), rows.map((r) => r[3])],
            options: () => ({
                axes: [axis('time'), axis('loss')],
                series: [{ label: 'time' }, ...lossSeries()],
            }),
        },
        'chart-volunteers': {
            data: () => [rows.map((r) => r[5] / 1000), rows.map((r) => r[4])],
            options: () => ({
                axes: [axis('time'), axis('volunteers online')],
                series: [{ label: 'time' },
                    { label: 'volunteers', stroke: cssColor('--volunteers'), width: 2, value: (u, v) => (v === null ? '–' : number.format(v)) }],
            }),
        },
    };

    function chartSize(box) {
        const width = Math.max(260, Math.floor(box.clientWidth));
        return { width, height: Math.round(Math.min(320, Math.max(180, width * 0.45))) };
    }

    function drawCharts() {
        if (typeof uPlot === 'undefined' || rows.length === 0)
            return;
        for (const [id, chart] of Object.entries(charted)) {
            const box = byId(id);
            if (!box)
                continue;
            if (charts[id])
                charts[id].setData(chart.data());
            else
                charts[id] = new uPlot(Object.assign(chartSize(box), chart.options()), chart.data(), box);
        }
    }

    function renderRecent() {
        const body = document.querySelector('#recent tbody');
        if (!body)
            return;
        const tbody = element('tbody');
        for (const r of rows.slice(-recentRounds).reverse())
            tbody.appendChild(row([number.format(r[0]), number.format(r[1]), loss(r[2]), loss(r[3]), number.format(r[4]), utc(r[5])]));
        body.replaceWith(tbody);
    }

    function renderLeaderboard(board) {
        const body = document.querySelector('#leaderboard tbody');
        if (!body)
            return;
        const tbody = element('tbody');
        board.forEach((v, i) => tbody.appendChild(row([i + 1, v.display_name, number.format(v.tokens),
            v.compute_hours.toFixed(2), number.format(v.accepted), number.format(v.rejected)])));
        body.replaceWith(tbody);
    }

    function renderCheckpoints(checkpoints) {
        const box = byId('checkpoints');
        if (!box)
            return;
        const fresh = element('div', null, { id: 'checkpoints' });
        if (checkpoints.length === 0)
            fresh.appendChild(element('p', 'No checkpoint is published yet.'));
        for (const c of checkpoints) {
            const article = element('article', null, { class: 'checkpoint' });
            article.appendChild(element('h3', 'Round ' + number.format(c.round)));
            const line = element('p', number.format(c.tokens) + ' tokens, validation loss ' + loss(c.val_loss) + ', published ');
            line.appendChild(element('time', utc(c.created_ms), { datetime: new Date(c.created_ms).toISOString() }));
            article.appendChild(line);
            for (const s of c.samples) {
                const figure = element('figure', null, { class: 'sample' });
                figure.appendChild(element('figcaption', 'What the model wrote at round ' + number.format(c.round)));
                const pre = element('pre');
                pre.appendChild(element('strong', s.prompt));
                pre.appendChild(document.createTextNode(s.text));
                figure.appendChild(pre);
                article.appendChild(figure);
            }
            const files = element('ul', null, { class: 'files' });
            for (const f of c.files) {
                const li = element('li');
                li.appendChild(f.url ? element('a', f.name, { href: f.url, download: '' }) : document.createTextNode(f.name));
                li.appendChild(document.createTextNode(' (' + compact.format(f.bytes) + 'B, SHA-256 '));
                li.appendChild(element('code', f.sha256));
                li.appendChild(document.createTextNode(')'));
                files.appendChild(li);
            }
            article.appendChild(files);
            fresh.appendChild(article);
        }
        box.replaceWith(fresh);
    }

    function renderSummary(p) {
        setText('tokens', number.format(p.tokens_trained));
        setText('goal', p.token_goal ? number.format(p.token_goal) : 'none set');
        setText('round', number.format(p.round));
        setText('online', number.format(p.volunteers_online));
        setText('val-loss', loss(p.val_loss));
        setText('hub-link', p.hub_link);
        if (p.token_goal) {
            const percent = Math.min(100, Math.floor((p.tokens_trained * 100) / p.token_goal));
            setText('goal-percent', percent + '%');
            const bar = byId('goal-bar');
            if (bar)
                bar.value = percent;
        }
        const updated = byId('updated');
        if (updated) {
            updated.textContent = utc(p.updated_ms);
            updated.setAttribute('datetime', new Date(p.updated_ms).toISOString());
        }
        if (p.generation === generation)
            return;
        generation = p.generation;
        renderLeaderboard(p.leaderboard);
        renderCheckpoints(p.checkpoints);
    }

    async function poll() {
        timer = 0;
        try {
            const summary = await getJson(api);
            await loadMetrics();
            renderSummary(summary);
            renderRecent();
            drawCharts();
            document.body.dataset.loaded = String(rows.length);
            delay = pollMs;
        } catch (e) {
            delay = Math.min(maxPollMs, delay * 2);
        }
        schedule();
    }

    function schedule() {
        if (timer || document.visibilityState === 'hidden')
            return;
        timer = setTimeout(poll, delay);
    }

    document.addEventListener('visibilitychange', () => {
        if (document.visibilityState === 'hidden') {
            clearTimeout(timer);
            timer = 0;
        } else if (!timer) {
            timer = setTimeout(poll, 0);
        }
    });
    window.addEventListener('resize', () => {
        for (const [id, chart] of Object.entries(charts)) {
            const box = byId(id);
            if (box)
                chart.setSize(chartSize(box));
        }
    });
    poll();
})();
