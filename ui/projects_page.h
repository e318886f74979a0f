#pragma once

// The followed hubs and their projects (CatalogModel in a tree), the
// selected project's terms, and the actions: add or remove a hub, refresh
// the catalog from the hubs, join, leave. GUI thread only.

#include "ui/page.h"

class QLineEdit;
class QPushButton;
class QTextBrowser;
class QTreeView;

namespace crowdtrain::ui {

class CatalogModel;

class ProjectsPage : public Page {
    Q_OBJECT

public:
    explicit ProjectsPage(Link& link, QWidget* parent = nullptr);
    void onEvent(const QString& type, const control::Value& body) override;
    CatalogModel* model() const { return m_model; }
    QTreeView* tree() const { return m_tree; }
    QTextBrowser* detail() const { return m_detail; }
    QLineEdit* hubLink() const { return m_hubLink; }
    QPushButton* joinButton() const { return m_join; }
    QPushButton* leaveButton() const { return m_leave; }
    void follow();
    void joinSelected();

protected:
    void load() override;

private:
    void buildTree(QWidget* parent);
    void showCatalog(const control::Value& catalog);
    void showDetail();
    void refresh(QPushButton* button);
    void unfollow();
    void leave();

    CatalogModel* m_model;
    QLineEdit* m_hubLink;
    QTreeView* m_tree;
    QTextBrowser* m_detail;
    QPushButton* m_join;
    QPushButton* m_leave;
    QPushButton* m_unfollow;
};

} // namespace crowdtrain::ui
