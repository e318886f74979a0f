#pragma once

// The first start: what Crowdtrain is (nothing runs until you choose), a
// display name or anonymous, a project (the local demo is always there and
// preselected), a preset; Finish sets them on the daemon and joins. On a
// new machine the app starts the service as the wizard opens: the project
// page says so and asks again every second until the service answers.
// The projects are a CatalogModel listed by a ProjectListModel, so a later
// reply updates the list in place. Next is possible only with a project
// chosen or "not now" ticked. Nothing here waits on the daemon. GUI thread
// only.

#include "net/control/value.h"

#include <QWizard>
#include <QWizardPage>

class QButtonGroup;
class QCheckBox;
class QLabel;
class QLineEdit;
class QListView;
class QTimer;

namespace crowdtrain::ui {

class CatalogModel;
class Link;
class ProjectListModel;
struct DaemonReply;

// The project page: complete with a project selected or "not now".
class ProjectChoicePage : public QWizardPage {
    Q_OBJECT

public:
    explicit ProjectChoicePage(QWidget* parent = nullptr);
    bool isComplete() const override;
    // Updates the list from a catalog reply, in place: what is selected
    // stays; when the list was empty, the demo (else the first) is selected.
    void setCatalog(const control::Value& catalog);
    void setWaiting(const QString& why);
    bool loaded() const { return m_loaded; }
    // Gives the keyboard to the list, or to "Not now" while that is ticked
    // (the list is disabled then): the page never opens on the buttons.
    void focusFirstChoice();

    // Rows of ProjectListModel: CatalogModel::kHubRole and kProjectRole say which.
    QListView* list() const { return m_list; }
    QCheckBox* notNowBox() const { return m_notNow; }
    QLabel* waitingLabel() const { return m_waiting; }

private:
    CatalogModel* m_catalog;
    ProjectListModel* m_projects;
    QLabel* m_waiting;
    QListView* m_list;
    QCheckBox* m_notNow;
    bool m_loaded = false;
};

class FirstRunWizard : public QWizard {
    Q_OBJECT

public:
    enum PageId { kWelcome, kWho, kProject, kHow };

    explicit FirstRunWizard(Link& link, QWidget* parent = nullptr);
    // Sends the name, the preset and the join, one after the other; the
    // wizard closes once all succeeded, else shows the service's message.
    void accept() override;
    // The error of the last Finish ("" while none).
    QString error() const { return m_error; }
    bool busy() const { return m_busy; }

    QLineEdit* nameEdit() const { return m_name; }
    QCheckBox* anonymousBox() const { return m_anonymous; }
    ProjectChoicePage* projectPage() const { return m_projectPage; }
    QListView* projectList() const;

signals:
    // Finish failed; error() says why.
    void failed();

private:
    void loadProjects();
    void setName();
    void setPreset();
    void join();
    void fail(const DaemonReply& reply);

    Link& m_link;
    QLineEdit* m_name;
    QCheckBox* m_anonymous;
    ProjectChoicePage* m_projectPage;
    QButtonGroup* m_presets;
    QLabel* m_progress;
    QTimer* m_retry;
    bool m_asking = false;
    bool m_startFailed = false;
    bool m_busy = false;
    QString m_error;
};

} // namespace crowdtrain::ui
