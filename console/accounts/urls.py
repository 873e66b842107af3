"""URLs of the accounts app: user pages, own tokens, budgets, and the users, tokens, budgets and usage API."""

from __future__ import annotations

from django.urls import path

from console.accounts import api, budget_views, budgets_api, usage_chart, views

app_name = "accounts"

urlpatterns = [
    path("users/", views.user_list, name="user-list"),
    path("users/<int:pk>/", views.user_detail, name="user-detail"),
    path("users/<int:pk>/role/", views.user_role, name="user-role"),
    path("users/<int:pk>/active/", views.user_active, name="user-active"),
    path("users/<int:pk>/password/", views.user_password, name="user-password"),
    path("users/<int:pk>/tokens/", views.user_token_create, name="user-token-create"),
    path("users/<int:pk>/tokens/<int:token_pk>/revoke/", views.user_token_revoke, name="user-token-revoke"),
    path("users/<int:pk>/budget/", budget_views.user_budget, name="user-budget"),
    path("users/<int:pk>/tokens/<int:token_pk>/", budget_views.token_budget, name="token-budget"),
    path("tokens/", views.own_tokens, name="own-tokens"),
    path("tokens/<int:token_pk>/revoke/", views.own_token_revoke, name="own-token-revoke"),
    path("api/users/", api.UserListApi.as_view(), name="api-users"),
    path("api/users/<int:pk>/", api.UserDetailApi.as_view(), name="api-user"),
    path("api/tokens/", api.TokenListApi.as_view(), name="api-tokens"),
    path("api/tokens/<int:pk>/", api.TokenDetailApi.as_view(), name="api-token"),
    path("api/users/<int:pk>/budget/", budgets_api.UserBudgetApi.as_view(), name="api-user-budget"),
    path("api/tokens/<int:pk>/budget/", budgets_api.TokenBudgetApi.as_view(), name="api-token-budget"),
    path("api/usage/", usage_chart.UsageApi.as_view(), name="api-usage"),
]
